/* SPDX-License-Identifier: MIT */
/*
 * cli.h - what the files of the phx command share: how it prints bytes,
 * rates and names, finds a mount's control socket, and its commands.
 */
#ifndef PHX_CLI_H
#define PHX_CLI_H

#include <stdbool.h>
#include <stdio.h>

#define DEFAULT_MOUNT "/mnt/phx"

/* print.c */
/* The usage to @out; the exit status (2 on stderr, 0 on stdout). */
int cli_usage(FILE *out);
/*
 * A usage error of phx @cmd (NULL: of phx itself) as one line: @why and
 * the command's usage; returns the exit status, 2.
 */
int cli_usage_err(const char *cmd, const char *why);
/*
 * The same for what getopt() returned for a bad option of @cmd (@opt '?'
 * or ':', the optstring starting with ':').
 */
int cli_bad_option(const char *cmd, int opt);
/*
 * Is @err what a call on the mount of a FUSE daemon that died fails
 * with?  ENOTCONN once the kernel has aborted the connection; a call that
 * was queued before ends with ECONNABORTED, or over io_uring with
 * ECANCELED while the kernel tears its queues down.
 */
bool cli_dead_mount_err(int err);
/* @v bytes as "1.5 GiB" into @buf; returns @buf. */
char *cli_bytes(char *buf, size_t len, double v);
/* GB/s of @bytes in @seconds, 0 when no time passed. */
double cli_rate(unsigned long long bytes, double seconds);
/* Seconds on the monotonic clock. */
double cli_now(void);
/*
 * Print @n bytes of a name to @f as ls -b does: printable characters as
 * they are, a backslash doubled, anything else (control bytes, invalid
 * UTF-8) as \xHH, so that no name can move the cursor or fake a row.
 */
void cli_print_name(FILE *f, const char *name, size_t n);
/*
 * @path escaped for a message as phx status prints names; one of four
 * rotating buffers, so that one message can quote several paths.
 */
const char *cli_quote(const char *path);
/* Control socket of the phxfs that holds @path, or -errno with a message. */
int cli_socket_of(const char *path, char *out, size_t len);

/* cp.c: phx cp [-q] [-r] SRC DST */
int cli_cp(int argc, char **argv);

#endif /* PHX_CLI_H */
