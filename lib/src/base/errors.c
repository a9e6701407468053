/* SPDX-License-Identifier: MIT */
/*
 * errors.c - the thread's last error message, and the names and byte
 * counts that messages are written with.
 */
#include <stdarg.h>
#include <stdio.h>

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

PHX_EXPORT const char *phx_kind_name(enum phx_device_kind kind)
{
	switch (kind) {
	case PHX_DEVICE_CUDA:
		return "cuda";
	case PHX_DEVICE_SIM:
		return "sim";
	case PHX_DEVICE_KMOD:
		return "kmod";
	default:
		return "none";
	}
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
