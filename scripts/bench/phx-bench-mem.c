/* SPDX-License-Identifier: MIT */
/*
 * phx-bench-mem.c - phx-bench's host memory case: each reader moves -m
 * bytes in a child process of its own ("phx-bench --mem-child PEER"), which
 * reports its peak RSS and pinned bytes; the parent turns that line into a
 * result.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "phx-bench.h"

/* ---- host memory while moving mem_total bytes (child process) -------- */

static atomic_bool sampling;
static atomic_uint_fast64_t pinned_peak;

static void *sampler(void *arg)
{
	struct bench *b = arg;
	struct phx_stats st;

	while (atomic_load(&sampling)) {
		if (b->pdev) {
			phx_stats_get(b->pdev, &st);
			if (st.pinned_bytes > atomic_load(&pinned_peak))
				atomic_store(&pinned_peak, st.pinned_bytes);
		}
		usleep(2000);
	}
	return NULL;
}

static uint64_t status_kib(const char *key)
{
	char line[256];
	uint64_t v = 0;
	FILE *f = fopen("/proc/self/status", "r");

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key)))
			v = strtoull(line + strlen(key), NULL, 10);
	if (f)
		fclose(f);
	return v * 1024;
}

int mem_child(struct bench *b, const char *peer)
{
	pthread_t th;
	uint64_t base, hwm, dst;
	CUdeviceptr dbig = 0;
	int fd;
	double t;

	cuda_init(b);
	if (!strcmp(peer, "libphoenix")) {
		if (phx_buf_alloc(b->pdev, b->mem_total, 0, &b->pbuf))
			bl_die("phx_buf_alloc: %s", phx_strerror_last());
	} else {
		CU_CHECK(blcu.cuMemAlloc_v2(&dbig, b->mem_total));
		if (!strcmp(peer, "cuFile") && cufile_load(b)) {
			printf("MEM n/a %s\n", b->cufile_why);
			return 0;
		}
	}
	warm_cache(b);
	/* Reset VmHWM to the current RSS: only the transfers count. */
	fd = open("/proc/self/clear_refs", O_WRONLY);
	if (fd < 0 || write(fd, "5", 1) != 1)
		bl_die("cannot reset the peak RSS (/proc/self/clear_refs)");
	close(fd);
	base = status_kib("VmRSS:");
	atomic_store(&sampling, true);
	pthread_create(&th, NULL, sampler, b);
	t = bl_now();
	for (dst = 0; dst + b->size <= b->mem_total; dst += b->size) {
		if (!strcmp(peer, "libphoenix"))
			peer_phx_read(b, dst);
		else if (!strcmp(peer, "cuFile"))
			peer_cufile_read(b, dbig + dst);
		else
			peer_pread_pinned(b, dbig + dst);
	}
	t = bl_now() - t;
	atomic_store(&sampling, false);
	pthread_join(th, NULL);
	hwm = status_kib("VmHWM:");
	/* No peer name: names have spaces ("pread pinned + copy"). */
	printf("MEM %" PRIu64 " %" PRIu64 " %" PRIu64 " %.2f\n", hwm, base,
	       (uint64_t)atomic_load(&pinned_peak), dst / t / 1e9);
	return 0;
}

/* Run "phx-bench --mem-child PEER" and turn its line into a result. */
void measure_mem(struct bench *b, const char *argv0, const char *peer,
		 bool ours)
{
	char cmd[8192], line[512], name[64], why[80];
	struct peer p = { .name = peer, .flags = ours ? OURS : 0 };
	struct result *r;
	uint64_t hwm, base, pinned;
	double gbps;
	FILE *f;
	bool got = false;

	snprintf(cmd, sizeof(cmd),
		 "'%s' -s %" PRIu64 " -m %" PRIu64 " --mem-child '%s' '%s'",
		 argv0, b->size, b->mem_total, peer, b->dir);
	snprintf(name, sizeof(name), "%s", peer);
	p.name = name;
	r = new_result("host memory", &p);
	r->peer = peer;
	r->unit = "MiB";
	printf("  %-16s %-34s", "host memory", peer);
	fflush(stdout);
	f = popen(cmd, "r");
	while (f && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "MEM %" SCNu64 " %" SCNu64 " %" SCNu64 " %lf",
			   &hwm, &base, &pinned, &gbps) == 4) {
			r->v[r->n++] = hwm / (double)MiB;
			snprintf(
				r->note, sizeof(r->note),
				"peak RSS; %.0f MiB before, pinned peak %.0f MiB, %.2f GB/s",
				base / (double)MiB, pinned / (double)MiB, gbps);
			got = true;
		} else if (sscanf(line, "MEM n/a %79[^\n]", why) == 1) {
			snprintf(r->note, sizeof(r->note), "n/a: %s", why);
		}
	}
	if (!f || pclose(f) != 0 || !got)
		if (!r->note[0])
			snprintf(r->note, sizeof(r->note),
				 "failed: see the messages above");
	printf(" %s\n", got ? "done" : r->note);
}
