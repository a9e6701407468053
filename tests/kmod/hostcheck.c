/* SPDX-License-Identifier: MIT */
/*
 * hostcheck.c - the host side of the phx.ko QEMU suite.
 *
 *   hostcheck gen FILE SIZE SEED        write a pattern file
 *   hostcheck fill FILE OFF LEN SEED    overwrite part of a file
 *   hostcheck verify CONSOLE BAR DISK TRACE
 *   hostcheck verify-fuse CONSOLE BAR DISK TRACE   (the passthrough suite)
 *
 * verify reads the guest's console log: its RESULT lines (the guest's own
 * verdicts), its HOSTCHECK lines (bytes that the ivshmem file BAR or the
 * disk image DISK must hold, bus ranges the NVMe controller must have
 * DMAed), the kernel log the guest printed at the end, and QEMU's trace of
 * pci_nvme_map_addr events.  It prints one "ok N - ..." or "not ok N - ..."
 * line per check and a closing count, and exits non-zero if any failed.
 */
#include <stdbool.h>
#include <stdlib.h>

#include "kmod_test.h"

#define MAX_CHECKS 6

struct span {
	uint64_t start, end;
};

static const char *const kmod_titles[] = {
	"",
	"bytes written through the mapping reach the ivshmem file, and back",
	"O_DIRECT pread (raw disk, ext4 file), io_uring reads and pwrite move exact bytes",
	"the NVMe controller's DMA addresses lie inside the ivshmem BAR",
	"libphoenix moves a multi-MiB file into phx0 on the p2p path",
	"bad input is refused, misuse is survived, the kernel log is clean",
};

static const char *const fuse_titles[] = {
	"",
	"cp and dd into phxfs passthrough files land in the ivshmem memory; the daemon saw 0 WRITEs",
	"reads back through the mount are exact; the daemon saw 0 READs",
	"phx cp from the NVMe disk is peer-to-peer (p2p, DMA inside the BAR)",
	"growth, truncate, append, mmap, EFBIG past the room, rename and unlink while open",
	"without phx.ko the same cp, dd and phx cp pass on the daemon path and say so",
	"the daemon killed under an open passthrough file: ENOTCONN, a new mount works, clean kernel log",
};

static const char *const *titles = kmod_titles;
static int nchecks = 5;
/* The check that owns the guest's kernel log. */
static int log_check = 5;
/* The check that owns the DMA trace. */
static int dma_check = 3;

static bool failed[MAX_CHECKS + 1];
static bool reported[MAX_CHECKS + 1];
static char notes[MAX_CHECKS + 1][160];

static struct span *dma_seen;
static size_t ndma_seen;
static uint64_t bar_bus, bar_size;
static uint64_t ev_in_bar, ev_out_bar, bytes_in_bar;

static void __attribute__((format(printf, 2, 3)))
fail(int check, const char *fmt, ...)
{
	va_list ap;

	failed[check] = true;
	printf("# check %d: ", check);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

static int write_pattern(const char *path, uint64_t off, uint64_t len,
			 uint32_t seed, int flags)
{
	FILE *f = fopen(path, flags ? "r+b" : "wb");
	char *buf = malloc(MIB);
	uint64_t done;

	if (!f || !buf) {
		perror(path);
		return 1;
	}
	if (fseeko(f, (off_t)off, SEEK_SET))
		return 1;
	for (done = 0; done < len; done += MIB) {
		uint64_t n = len - done < MIB ? len - done : MIB;

		pat_fill(buf, n, seed, done);
		if (fwrite(buf, 1, n, f) != n) {
			perror(path);
			return 1;
		}
	}
	free(buf);
	return fclose(f) ? 1 : 0;
}

static char *slurp(const char *path, uint64_t off, uint64_t len)
{
	FILE *f = fopen(path, "rb");
	char *buf = malloc(len ? len : 1);

	if (!f || !buf || fseeko(f, (off_t)off, SEEK_SET) ||
	    fread(buf, 1, len, f) != len) {
		if (f)
			fclose(f);
		free(buf);
		return NULL;
	}
	fclose(f);
	return buf;
}

static int cmp_span(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

static void load_trace(const char *path)
{
	FILE *f = fopen(path, "r");
	char line[512];
	size_t cap = 0, i, n = 0;

	if (!f) {
		fail(3, "no trace file %s", path);
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		const char *ev = strstr(line, "pci_nvme_map_addr ");
		unsigned long long addr, len;

		if (!ev || sscanf(ev, "pci_nvme_map_addr addr 0x%llx len %llu",
				  &addr, &len) != 2)
			continue;
		if (addr < bar_bus || addr + len > bar_bus + bar_size) {
			ev_out_bar++;
			continue;
		}
		ev_in_bar++;
		bytes_in_bar += len;
		if (ndma_seen == cap) {
			cap = cap ? cap * 2 : 1024;
			dma_seen = realloc(dma_seen, cap * sizeof(*dma_seen));
		}
		dma_seen[ndma_seen].start = addr;
		dma_seen[ndma_seen++].end = addr + len;
	}
	fclose(f);
	qsort(dma_seen, ndma_seen, sizeof(*dma_seen), cmp_span);
	for (i = 0; i < ndma_seen; i++) {
		if (n && dma_seen[i].start <= dma_seen[n - 1].end) {
			if (dma_seen[i].end > dma_seen[n - 1].end)
				dma_seen[n - 1].end = dma_seen[i].end;
		} else {
			dma_seen[n++] = dma_seen[i];
		}
	}
	ndma_seen = n;
}

static bool dma_covered(uint64_t start, uint64_t len)
{
	uint64_t end = start + len;
	size_t i;

	for (i = 0; i < ndma_seen && start < end; i++) {
		if (dma_seen[i].end <= start)
			continue;
		if (dma_seen[i].start > start)
			return false;
		start = dma_seen[i].end;
	}
	return start >= end;
}

static void hostcheck(int check, const char *kind, char *rest, const char *bar,
		      const char *disk)
{
	unsigned long long off, len, a, b;
	char src[16];
	const char *file = !strcmp(kind, "bar") ? bar : disk;
	char *have, *want;

	if (!strcmp(kind, "dma")) {
		if (sscanf(rest, "%llu %llu", &off, &len) != 2)
			fail(check, "bad dma line");
		else if (off < bar_bus || off + len > bar_bus + bar_size)
			fail(check, "guest named %#llx outside the BAR", off);
		else if (!dma_covered(off, len))
			fail(check,
			     "no NVMe DMA covers bus %#llx..%#llx: bounced?",
			     off, off + len);
		return;
	}
	if (sscanf(rest, "%llu %llu %15s %llu %llu", &off, &len, src, &a, &b) <
	    4) {
		fail(check, "bad HOSTCHECK line: %s %s", kind, rest);
		return;
	}
	have = slurp(file, off, len);
	if (!have) {
		fail(check, "cannot read %llu bytes at %llu of %s", len, off,
		     file);
		return;
	}
	if (!strcmp(src, "pattern")) {
		int64_t bad = pat_check(have, len, (uint32_t)a, b);

		if (bad >= 0)
			fail(check, "%s bytes %llu..%llu: differ at +%lld",
			     kind, off, off + len, (long long)bad);
	} else {
		want = slurp(disk, a, len);
		if (!want || memcmp(have, want, len))
			fail(check,
			     "%s bytes %llu..%llu differ from disk at %llu",
			     kind, off, off + len, a);
		free(want);
	}
	free(have);
}

static int verify(const char *console, const char *bar, const char *disk,
		  const char *trace)
{
	FILE *f = fopen(console, "r");
	char line[1024];
	bool in_dmesg = false, dmesg_seen = false;
	int i, passed = 0;

	if (!f) {
		perror(console);
		return 1;
	}
	/* First pass: the BAR's bus address, needed to read the trace. */
	while (fgets(line, sizeof(line), f)) {
		unsigned long long b, s;

		if (sscanf(line, "HOSTCHECK 0 info %llu %llu", &b, &s) == 2) {
			bar_bus = b;
			bar_size = s;
		}
	}
	if (!bar_size)
		fail(dma_check, "the guest never reported the BAR");
	else
		load_trace(trace);
	rewind(f);
	while (fgets(line, sizeof(line), f)) {
		char kind[16], verdict[8];
		int check, n = 0;

		line[strcspn(line, "\r\n")] = 0;
		if (!strcmp(line, "==== dmesg begin")) {
			in_dmesg = dmesg_seen = true;
			continue;
		}
		if (!strcmp(line, "==== dmesg end")) {
			in_dmesg = false;
			continue;
		}
		if (in_dmesg || !strncmp(line, "[", 1)) {
			if (strstr(line, "BUG:") || strstr(line, "WARNING:") ||
			    strstr(line, "Oops"))
				fail(log_check, "kernel log: %s", line);
			continue;
		}
		if (sscanf(line, "RESULT %d %7s", &check, verdict) == 2 &&
		    check >= 1 && check <= nchecks) {
			reported[check] = true;
			if (strcmp(verdict, "pass"))
				fail(check, "the guest's own checks failed");
			continue;
		}
		if (sscanf(line, "HOSTCHECK %d %15s %n", &check, kind, &n) ==
			    2 &&
		    n && check >= 1 && check <= nchecks) {
			hostcheck(check, kind, line + n, bar, disk);
			continue;
		}
		if (strstr(line, "Kernel panic") || strstr(line, "BUG:"))
			fail(log_check, "console: %s", line);
	}
	fclose(f);
	if (!dmesg_seen)
		fail(log_check,
		     "the guest did not finish (no kernel log dump)");
	if (!ev_in_bar)
		fail(dma_check, "no NVMe DMA inside the BAR at all");
	snprintf(
		notes[dma_check], sizeof(notes[dma_check]),
		" (%llu map_addr events, %llu MiB, inside %#llx+%llu MiB; %llu outside)",
		(unsigned long long)ev_in_bar,
		(unsigned long long)(bytes_in_bar / MIB),
		(unsigned long long)bar_bus,
		(unsigned long long)(bar_size / MIB),
		(unsigned long long)ev_out_bar);
	if (titles == kmod_titles)
		reported[3] = true; /* check 3 is the host's alone */

	for (i = 1; i <= nchecks; i++) {
		bool ok = reported[i] && !failed[i];

		if (!reported[i])
			printf("# check %d: the guest never reported it\n", i);
		printf("%sok %d - %s%s\n", ok ? "" : "not ", i, titles[i],
		       notes[i]);
		passed += ok;
	}
	printf("%d passed, %d failed\n", passed, nchecks - passed);
	return passed == nchecks ? 0 : 1;
}

int main(int argc, char **argv)
{
	(void)test_failures;
	if (argc == 5 && !strcmp(argv[1], "gen"))
		return write_pattern(argv[2], 0, strtoull(argv[3], NULL, 0),
				     (uint32_t)strtoul(argv[4], NULL, 0), 0);
	if (argc == 6 && !strcmp(argv[1], "fill"))
		return write_pattern(argv[2], strtoull(argv[3], NULL, 0),
				     strtoull(argv[4], NULL, 0),
				     (uint32_t)strtoul(argv[5], NULL, 0), 1);
	if (argc == 6 && !strcmp(argv[1], "verify-fuse")) {
		titles = fuse_titles;
		nchecks = 6;
		log_check = 6;
		return verify(argv[2], argv[3], argv[4], argv[5]);
	}
	if (argc == 6 && !strcmp(argv[1], "verify"))
		return verify(argv[2], argv[3], argv[4], argv[5]);
	fprintf(stderr,
		"usage: hostcheck gen FILE SIZE SEED | fill FILE OFF LEN SEED |\n"
		"       verify CONSOLE BAR DISK TRACE\n");
	return 2;
}
