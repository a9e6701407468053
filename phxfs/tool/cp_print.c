/* SPDX-License-Identifier: MIT */
/*
 * cp_print.c - how phx cp prints: its progress bar, and the one-line
 * messages of a copy that failed.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cp.h"

void cp_progress(unsigned long long done, unsigned long long total, double t0)
{
	char d[32], t[32];
	double dt = cli_now() - t0;
	int width = 30, fill = total ? (int)(width * done / total) : width;

	fprintf(stderr, "\r[%.*s%*s] %3d%%  %s / %s  %.2f GB/s ", fill,
		"##############################", width - fill, "",
		total ? (int)(100 * done / total) : 100,
		cli_bytes(d, sizeof(d), (double)done),
		cli_bytes(t, sizeof(t), (double)total), cli_rate(done, dt));
}

void cp_end_bar(struct cp_run *r)
{
	if (r->bar)
		fputc('\n', stderr);
	r->bar = false;
}

int cp_err(struct cp_run *r, const char *path, int err)
{
	cp_end_bar(r);
	fprintf(stderr, "phx: cp: %s: %s\n", cli_quote(path), strerror(err));
	r->failed = 1;
	return -err;
}

void cp_say(struct cp_run *r, const char *path, const char *what)
{
	cp_end_bar(r);
	fprintf(stderr, "phx: cp: %s: %s\n", cli_quote(path), what);
	r->failed = 1;
}
