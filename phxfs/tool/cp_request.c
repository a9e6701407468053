/* SPDX-License-Identifier: MIT */
/*
 * cp_request.c - how phx cp talks to the daemon: a CP or CPOUT request
 * and its answer, with the progress it sends, and how a signal stops the
 * daemon's copy.
 *
 * SIGINT, SIGTERM and SIGHUP stop a copy: the handler notes the signal
 * and wakes the wait for the daemon's answer through a pipe, and the copy
 * removes what it made before phx exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "phxfs_client.h"
#include "cli.h"
#include "cp.h"

volatile sig_atomic_t cp_signal;
static int sig_pipe[2] = { -1, -1 };

static void on_signal(int sig)
{
	int err = errno;

	cp_signal = sig;
	if (write(sig_pipe[1], "", 1) < 0) {
		/* full: a wake-up is pending already */
	}
	errno = err;
}

int cp_catch_signals(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
	struct sigaction sa = { .sa_handler = on_signal };
	unsigned int i;

	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK))
		return -errno;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (sigaction(sigs[i], &sa, NULL))
			return -errno;
	return 0;
}

/*
 * Wait until @s has something to read; -EINTR once a signal stopped
 * the copy, -ETIMEDOUT when the daemon sent nothing for
 * PHXFS_CLIENT_TIMEOUT seconds (as the socket's own reads time out).
 */
static int wait_answer(int s)
{
	struct pollfd p[2] = { { .fd = s, .events = POLLIN },
			       { .fd = sig_pipe[0], .events = POLLIN } };
	int n;

	for (;;) {
		if (cp_signal)
			return -EINTR;
		n = poll(p, 2, PHXFS_CLIENT_TIMEOUT * 1000);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (cp_signal)
			return -EINTR;
		if (!n)
			return -ETIMEDOUT;
		if (n > 0 && p[0].revents)
			return 0;
	}
}

/*
 * Stop the daemon's copy on @s, and wait until it let go of its files:
 * with the connection shut for reading, the daemon's next progress line
 * fails, it stops at the end of the step it is in, and closes its end
 * (POLLHUP here).  A second signal stops the wait.
 */
static void stop_copy(int s)
{
	struct pollfd p[2] = { { .fd = s, .events = 0 },
			       { .fd = sig_pipe[0], .events = POLLIN } };
	char drain[16];

	while (read(sig_pipe[0], drain, sizeof(drain)) > 0)
		;
	if (shutdown(s, SHUT_RD))
		return;
	while (poll(p, 2, PHXFS_CLIENT_TIMEOUT * 1000) < 0 && errno == EINTR)
		;
}

int cp_request(struct cp_run *r, const char *req, int fd, int pfd,
	       const char *what)
{
	char line[PHXFS_LINE_MAX], via[64];
	unsigned long long done, total;
	int s, ret;

	if (cp_signal)
		return -EINTR;
	s = phxfs_connect(r->sock);
	if (s < 0) {
		cp_end_bar(r);
		fprintf(stderr, "phx: cp: cannot reach phxfs at %s: %s\n",
			cli_quote(r->sock), strerror(-s));
		return s;
	}
	snprintf(line, sizeof(line), "%s\n", req);
	ret = phxfs_send_request(s, line, fd,
				 cp_fd_path(pfd, via, sizeof(via)));
	if (ret) {
		cp_end_bar(r);
		fprintf(stderr, "phx: cp: %s: cannot send the request: %s\n",
			cli_quote(what), strerror(-ret));
	}
	while (!ret && !(ret = wait_answer(s)) &&
	       (ret = phxfs_read_line(s, line, sizeof(line))) >= 0) {
		ret = 0;
		if (sscanf(line, "PROGRESS %llu %llu", &done, &total) == 2) {
			if (r->bar)
				cp_progress(r->base + done, r->total, r->t0);
			continue;
		}
		if (sscanf(line, "OK %llu %31s", &done, r->path) == 2) {
			r->base += done;
			r->files++;
			break;
		}
		ret = phxfs_line_err(line);
		cp_end_bar(r);
		fprintf(stderr, "phx: cp: %s: %s\n", cli_quote(what), line);
		break;
	}
	if (ret == -EPIPE) {
		struct statvfs sv;

		cp_end_bar(r);
		if (fstatvfs(pfd, &sv) && cli_dead_mount_err(errno)) {
			/* nothing of it can be removed, nor needs to be */
			fprintf(stderr,
				"phx: cp: %s: phxfs died during the copy; its files are gone with it\n",
				cli_quote(what));
			ret = -ENOTCONN;
		} else {
			fprintf(stderr, "phx: cp: %s: phxfs at %s hung up\n",
				cli_quote(what), cli_quote(r->sock));
		}
	} else if (ret == -ETIMEDOUT) {
		cp_end_bar(r);
		fprintf(stderr,
			"phx: cp: %s: phxfs at %s sent nothing for %d s; is the daemon stuck?\n",
			cli_quote(what), cli_quote(r->sock),
			PHXFS_CLIENT_TIMEOUT);
	}
	if (ret == -EINTR)
		stop_copy(s);
	close(s);
	return ret;
}

void cp_stopped(struct cp_run *r, const char *path, const char *what)
{
	cp_end_bar(r);
	fprintf(stderr, "phx: cp: %s: stopped by %s; %s\n", cli_quote(path),
		strsignal(cp_signal), what);
	r->failed = 1;
	r->stopped = true;
}
