/* SPDX-License-Identifier: MIT */
/*
 * errors.c - the thread's last error message, and the names and byte
 * counts that messages are written with: the words of the device kinds
 * (the one table of them), the data paths' names.
 */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base.h"

static __thread char last_error[512];

int phx_err(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	return -err;
}

void phx_err_clear(void)
{
	last_error[0] = '\0';
}

PHX_EXPORT const char *phx_strerror_last(void)
{
	return last_error;
}

PHX_EXPORT const char *phx_version(void)
{
#define PHX_STR2(x) #x
#define PHX_STR(x) PHX_STR2(x)
	return PHX_STR(PHX_VERSION_MAJOR) "." PHX_STR(
		PHX_VERSION_MINOR) "." PHX_STR(PHX_VERSION_PATCH);
}

/*
 * The words of each device kind: its name (phx_kind_name(), PHX_DEVICE)
 * and the prefix of its devices' names ("gpu0", phxfs's directories).
 * Either word names the kind (phx_kind_word()).
 */
static const struct {
	const char *name;
	const char *prefix;
} kind_words[PHX_DEVICE_KINDS] = {
	[PHX_DEVICE_NONE] = { "none", "none" },
	[PHX_DEVICE_CUDA] = { "cuda", "gpu" },
	[PHX_DEVICE_SIM] = { "sim", "sim" },
	[PHX_DEVICE_KMOD] = { "kmod", "phx" },
};

/* @kind, or PHX_DEVICE_NONE where it is no kind. */
static enum phx_device_kind kind_known(enum phx_device_kind kind)
{
	return (unsigned int)kind < PHX_DEVICE_KINDS ? kind : PHX_DEVICE_NONE;
}

PHX_EXPORT const char *phx_kind_name(enum phx_device_kind kind)
{
	return kind_words[kind_known(kind)].name;
}

const char *phx_kind_prefix(enum phx_device_kind kind)
{
	return kind_words[kind_known(kind)].prefix;
}

static bool word_is(const char *word, const char *s, size_t len)
{
	return strlen(word) == len && !strncmp(s, word, len);
}

enum phx_device_kind phx_kind_word(const char *s, size_t len)
{
	enum phx_device_kind k;

	for (k = PHX_DEVICE_NONE + 1; k < PHX_DEVICE_KINDS; k++)
		if (word_is(kind_words[k].name, s, len) ||
		    word_is(kind_words[k].prefix, s, len))
			return k;
	return PHX_DEVICE_NONE;
}

PHX_EXPORT const char *phx_path_name(enum phx_path path)
{
	static const char *const names[PHX_PATH_COUNT] = {
		[PHX_PATH_NONE] = "none",
		[PHX_PATH_STAGED] = "staged",
		[PHX_PATH_BUFFERED] = "buffered",
		[PHX_PATH_P2P] = "p2p",
		[PHX_PATH_MEMCPY] = "memcpy",
		[PHX_PATH_PASSTHROUGH] = "passthrough",
	};

	if ((unsigned int)path >= PHX_PATH_COUNT || !names[path])
		return "none";
	return names[path];
}

char *phx_fmt_bytes(char *buf, size_t len, uint64_t bytes)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned int u = 0;
	double v = (double)bytes;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%llu B", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%.1f %s", v, units[u]);
	return buf;
}
