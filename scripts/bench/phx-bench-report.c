/* SPDX-License-Identifier: MIT */
/*
 * phx-bench-report.c - phx-bench's results, one per peer and case, and the
 * table that ends the run: medians, spreads and the ratios to the case's
 * limit and to libphoenix.
 */
#include <stdio.h>
#include <string.h>

#include "phx-bench.h"

static struct result results[64];
static int nresults;

struct result *new_result(const char *casename, const struct peer *p)
{
	struct result *r = &results[nresults++];

	memset(r, 0, sizeof(*r));
	r->casename = casename;
	r->peer = p->name;
	r->limit = p->flags & LIMIT;
	r->ours = p->flags & OURS;
	r->unit = "GB/s";
	return r;
}

static double median(const struct result *r)
{
	return r->n ? bl_median(r->v, r->n) : 0;
}

static double spread(const struct result *r)
{
	double lo = r->v[0], hi = r->v[0], m = median(r);

	for (int i = 1; i < r->n; i++) {
		lo = r->v[i] < lo ? r->v[i] : lo;
		hi = r->v[i] > hi ? r->v[i] : hi;
	}
	return m > 0 ? (hi - lo) / m * 100 : 0;
}

void print_table(void)
{
	const char *last = NULL;

	printf("\n%-18s %-34s %9s %6s %8s %8s  %s\n", "case", "peer", "median",
	       "spread", "x limit", "x phx", "note");
	for (int i = 0; i < nresults; i++) {
		struct result *r = &results[i];
		double lim = 0, ours = 0, m = median(r);
		char ratio_l[16] = "-", ratio_p[16] = "-";

		if (!last || strcmp(last, r->casename))
			printf("\n");
		last = r->casename;
		for (int j = 0; j < nresults; j++) {
			struct result *o = &results[j];

			if (strcmp(o->casename, r->casename))
				continue;
			if (o->limit && median(o) > lim)
				lim = median(o);
			if (o->ours)
				ours = median(o);
		}
		if (!r->n) {
			printf("%-18s %-34s %9s %6s %8s %8s  %s\n", r->casename,
			       r->peer, "-", "-", "-", "-", r->note);
			continue;
		}
		if (lim > 0 && strcmp(r->unit, "GB/s") == 0)
			snprintf(ratio_l, sizeof(ratio_l), "%.2f", m / lim);
		if (ours > 0)
			snprintf(ratio_p, sizeof(ratio_p), "%.2f", m / ours);
		printf("%-18s %-34s %4.*f %-4s %5.0f%% %8s %8s  %s%s\n",
		       r->casename, r->peer, strcmp(r->unit, "MiB") ? 2 : 0, m,
		       r->unit, spread(r), ratio_l, ratio_p,
		       r->limit ? "limit " : "", r->note);
	}
	printf("\nGB/s = 1e9 bytes/s, median of the timed runs; spread = (max - min) / median;\n"
	       "x limit = median / the case's limit (the best limit row); x phx = median / libphoenix's.\n");
}
