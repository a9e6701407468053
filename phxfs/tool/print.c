/* SPDX-License-Identifier: MIT */
/* print.c - how phx prints its usage, bytes, rates and names, and finds
 * a socket. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdbool.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "phxfs_client.h"
#include "cli.h"

int cli_usage(FILE *out)
{
	fprintf(out,
		"usage: phx COMMAND [ARGS]\n\n"
		"  mount [-f] [-o OPTS] [MOUNTPOINT]  start phxfs (default %s)\n"
		"  umount [MOUNTPOINT]                stop it; its files are lost\n"
		"  status [-a] [MOUNTPOINT]           devices, memory, files held\n"
		"  cp [-q] [-r] SRC DST               copy SRC into or out of phxfs\n"
		"                                     through the transfer engine\n\n"
		"phxfs keeps file contents in device memory only: they vanish\n"
		"when it is unmounted or killed.\n",
		DEFAULT_MOUNT);
	return out == stderr ? 2 : 0;
}

/* One line for each command: phx CMD's arguments. */
static const char *const usages[][2] = {
	{ "mount", "[-f] [-o OPTIONS] [MOUNTPOINT]" },
	{ "umount", "[MOUNTPOINT]" },
	{ "status", "[-a] [MOUNTPOINT]" },
	{ "cp", "[-q] [-r] SRC DST" },
};

int cli_usage_err(const char *cmd, const char *why)
{
	const char *args = "COMMAND [ARGS]";
	unsigned int i;

	for (i = 0; cmd && i < sizeof(usages) / sizeof(usages[0]); i++)
		if (!strcmp(usages[i][0], cmd))
			args = usages[i][1];
	fprintf(stderr,
		"phx%s%s: %s; usage: phx%s%s %s (phx --help says more)\n",
		cmd ? " " : "", cmd ? cmd : "", why, cmd ? " " : "",
		cmd ? cmd : "", args);
	return 2;
}

int cli_bad_option(const char *cmd, int opt)
{
	char why[64];

	if (opt == ':')
		snprintf(why, sizeof(why), "option -%c needs an argument",
			 optopt);
	else if (optopt > ' ' && optopt < 0x7f)
		snprintf(why, sizeof(why), "invalid option -%c", optopt);
	else
		snprintf(why, sizeof(why), "invalid option");
	return cli_usage_err(cmd, why);
}

bool cli_dead_mount_err(int err)
{
	return err == ENOTCONN || err == ECONNABORTED || err == ECANCELED;
}

char *cli_bytes(char *buf, size_t len, double v)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned int u = 0;

	while (v >= 1024 && u < 4) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", v, units[u]);
	return buf;
}

double cli_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Length of the valid UTF-8 sequence of a printable character at @s. */
static size_t utf8_char(const unsigned char *s, size_t n)
{
	size_t len, i;
	unsigned int cp;

	if (s[0] < 0x80)
		return s[0] >= ' ' && s[0] != 0x7f;
	len = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
	if (!len || len > n || s[0] > 0xf4)
		return 0;
	cp = s[0] & (0x7f >> len);
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	/* overlong, surrogates, C1 controls */
	if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp < 0xa0)
		return 0;
	return len;
}

void cli_print_name(FILE *f, const char *name, size_t n)
{
	const unsigned char *p = (const unsigned char *)name;
	size_t i = 0;

	while (i < n) {
		size_t k = utf8_char(p + i, n - i);

		if (p[i] == '\\') {
			fputs("\\\\", f);
			k = 1;
		} else if (k) {
			fwrite(p + i, 1, k, f);
		} else {
			fprintf(f, "\\x%02x", p[i]);
			k = 1;
		}
		i += k;
	}
}

const char *cli_quote(const char *path)
{
	static char bufs[4][4 * PATH_MAX];
	static unsigned int next;
	char *out = bufs[next++ % 4];
	FILE *f = fmemopen(out, sizeof(bufs[0]), "w");

	if (!f)
		return "?";
	cli_print_name(f, path, strlen(path));
	fclose(f);
	return out;
}

int cli_socket_of(const char *path, char *out, size_t len)
{
	int ret = phxfs_socket_of(path, out, len);

	if (ret)
		fprintf(stderr,
			"phx: %s: %s; is phxfs mounted there (phx mount)?\n",
			cli_quote(path),
			ret == -ENOTSUP ? "not on phxfs" : strerror(-ret));
	return ret;
}

double cli_rate(unsigned long long bytes, double seconds)
{
	return seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0;
}
