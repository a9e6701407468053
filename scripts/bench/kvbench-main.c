/* SPDX-License-Identifier: MIT */
/*
 * phx-kvbench - the small-I/O side of Phoenix against its peers, in one
 * run on one file (scripts/bench-kv.sh drives it on the GPU machine):
 *
 *   phx-kvbench [options] kv|small|setup|all DIR
 *
 *   kv      LMCache's slab pattern (kvbench-kv.c)
 *   small   small random reads, IOPS and latency (kvbench-small.c)
 *   setup   driver open, registration, first read (kvbench-setup.c)
 *   all     kv, then small (setup forks before any GPU use: run it alone)
 *
 * The CUDA driver, cuFile and libphxfile.so are loaded at run time, so it
 * builds anywhere; without a GPU the libphoenix peers run on the
 * simulated device and the CUDA peers say why they did not.  Ratios are
 * within the run; nothing here asserts a time.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "kvbench.h"

static void usage(const char *why)
{
	fprintf(stderr,
		"phx-kvbench: %s\n"
		"usage: phx-kvbench [options] kv|small|setup|all DIR\n"
		"  -s SIZE      size of the data file (default 4G)\n"
		"  -r RUNS      timed runs per peer (default 3, at most %d)\n"
		"  -b LIST      block sizes (kv: 16K,256K,4M,16M; small: 4K,8K,16K,64K)\n"
		"  -q LIST      small: queue depths (default 1,8,32,128)\n"
		"  -n LIST      kv: stream counts (default 1,4; at most %d)\n"
		"  -o OPS       kv: chunks per pass (default 1024, at most 256 MiB);\n"
		"               small: reads per run (default 2000, at least 64 x QD)\n"
		"  DIR          a directory on the disk to measure (not tmpfs)\n"
		"libphxfile.so is taken from beside the program or PHX_PHXFILE_LIBRARY.\n",
		why, BL_MAX_RUNS, KV_MAX_STREAMS);
	exit(2);
}

static int parse_list(const char *s, bool sizes, uint64_t *out, int max)
{
	char buf[256], *save = NULL, *tok;
	int n = 0;

	snprintf(buf, sizeof(buf), "%s", s);
	for (tok = strtok_r(buf, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		uint64_t v;

		if (n == max)
			return -1;
		char *end;

		if (sizes) {
			if (phx_parse_size(tok, &v))
				return -1;
		} else {
			errno = 0;
			v = strtoull(tok, &end, 10);
			if (errno || end == tok || *end || *tok == '-')
				return -1;
		}
		if (!v || (sizes && v % 4096))
			return -1;
		out[n++] = v;
	}
	return n;
}

/*
 * Option -@opt's list @arg of up to @max (8 at most) counts, 1 to @limit
 * each, into @out; returns how many.  A list that does not parse is
 * refused with @what, the name of its counts, and @eg, an example; a
 * count over @limit with @over, the name of one.
 */
static int parse_counts(int opt, const char *arg, int max, int limit,
			const char *what, const char *eg, const char *over,
			int *out)
{
	uint64_t list[8];
	int n = parse_list(arg, false, list, max);

	if (n <= 0)
		bl_die("bad -%c %s: up to %d %s, 1 to %d, comma separated (%s)",
		       opt, arg, max, what, limit, eg);
	for (int i = 0; i < n; i++) {
		if (list[i] > (uint64_t)limit)
			bl_die("bad -%c %s: %" PRIu64 " %s, at most %d", opt,
			       arg, list[i], over, limit);
		out[i] = (int)list[i];
	}
	return n;
}

static void print_versions(struct kb *b, const char *mode)
{
	struct utsname u;
	char date[64];

	uname(&u);
	bl_date(date, sizeof(date));
	printf("phx-kvbench %s: %s, libphoenix %s, %s, kernel %s\n", mode, date,
	       phx_version(), b->gpu, u.release);
	printf("file %s: %" PRIu64
	       " MiB; %d timed runs per peer after one untimed; cold = %s; PHX_STREAM_WAIT=%s\n",
	       b->path, b->size / MiB, b->runs,
	       b->root ? "drop_caches + fadvise" :
			 "fadvise(DONTNEED) (not root)",
	       bl_stream_wait());
	printf("libphxfile: %s; cuFile: %s\n",
	       b->phxfile_why ? b->phxfile_why : b->phxfile_path,
	       b->cufile_why ? b->cufile_why : "loaded");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	struct kb bench = { .size = 4 * GiB, .runs = 3 };
	struct kb *b = &bench;
	struct kb_opts kv = { .sizes = { 16 * KiB, 256 * KiB, 4 * MiB,
					 16 * MiB },
			      .nsizes = 4,
			      .streams = { 1, 4 },
			      .nstreams = 2,
			      .ops = 1024 };
	struct kb_opts sm = { .sizes = { 4 * KiB, 8 * KiB, 16 * KiB, 64 * KiB },
			      .nsizes = 4,
			      .qds = { 1, 8, 32, 128 },
			      .nqds = 4,
			      .ops = 2000 };
	uint64_t list[8];
	const char *mode;
	bool size_set = false;
	struct stat st;
	int c, n;

	setvbuf(stdout, NULL, _IOLBF, 0);
	opterr = 0; /* one line of our own for a bad option */
	while ((c = getopt(argc, argv, "s:r:b:q:n:o:")) != -1) {
		switch (c) {
		case 's':
			b->size = bl_opt_size(optarg, 64 * MiB);
			size_set = true;
			break;
		case 'r':
			b->runs = bl_opt_runs(optarg);
			if (b->runs < 0)
				bl_die("bad -r %s: timed runs per peer, 1 to %d",
				       optarg, BL_MAX_RUNS);
			break;
		case 'b':
			n = parse_list(optarg, true, list, 8);
			if (n <= 0)
				bl_die("bad -b %s: up to 8 sizes, multiples of 4K, comma separated (16K,4M)",
				       optarg);
			memcpy(kv.sizes, list, n * sizeof(*list));
			memcpy(sm.sizes, list, n * sizeof(*list));
			kv.nsizes = sm.nsizes = n;
			break;
		case 'q':
			sm.nqds = parse_counts('q', optarg, 8, KB_MAX_QD,
					       "queue depths", "1,32,128",
					       "queued", sm.qds);
			break;
		case 'n':
			kv.nstreams = parse_counts(
				'n', optarg, 4, KV_MAX_STREAMS, "stream counts",
				"1,4", "streams", kv.streams);
			break;
		case 'o':
			if (parse_list(optarg, false, list, 1) != 1 ||
			    list[0] > INT32_MAX)
				bl_die("bad -o %s: a count of chunks (kv) or reads (small), 1 or more",
				       optarg);
			kv.ops = sm.ops = list[0];
			break;
		default:
			bl_die(optopt && strchr("srbqno", optopt) ?
				       "option -%c needs a value; run without arguments for the usage" :
				       "unknown option -%c; run without arguments for the usage",
			       optopt);
		}
	}
	if (optind != argc - 2)
		usage("expected a mode and a directory after the options");
	mode = argv[optind];
	if (strcmp(mode, "kv") && strcmp(mode, "small") &&
	    strcmp(mode, "setup") && strcmp(mode, "all"))
		bl_die("unknown mode %s: use kv, small, setup or all", mode);
	b->dir = argv[optind + 1];
	snprintf(b->path, sizeof(b->path), "%s/phx-kvbench.dat", b->dir);
	b->root = access("/proc/sys/vm/drop_caches", W_OK) == 0;

	if (!strcmp(mode, "setup")) {
		/*
		 * Set-up reads the first MiB: a data file an earlier mode
		 * made is kept whatever its size (it is checked as usual),
		 * rather than rewritten at the default size.
		 */
		if (!size_set && !stat(b->path, &st) &&
		    st.st_size >= (off_t)(64 * MiB) && st.st_size % MiB == 0)
			b->size = (uint64_t)st.st_size;
		/* the parent stays off the GPU: CUDA does not survive fork */
		b->host = aligned_alloc(4096, KB_HOST);
		if (!b->host)
			bl_die("out of host memory");
		snprintf(b->gpu, sizeof(b->gpu), "(set-up runs in children)");
		b->phxfile_path = "beside the program";
		b->cufile_why = "loaded in each child";
		print_versions(b, mode);
		kb_make_file(b);
		kb_mode_setup(b, &kv);
		return 0;
	}
	kb_load_cuda(b);
	kb_load_cufile(b);
	kb_load_phxfile(b, argv[0]);
	if (!b->cufile_why) {
		CUfileError_t e = blcf.cuFileDriverOpen();

		static char why[240];

		if (e.err) {
			snprintf(why, sizeof(why), "cuFileDriverOpen: %s",
				 kb_cferr(e));
			b->cufile_why = why;
		}
	}
	print_versions(b, mode);
	kb_make_file(b);
	if (!strcmp(mode, "kv") || !strcmp(mode, "all"))
		kb_mode_kv(b, &kv);
	if (!strcmp(mode, "small") || !strcmp(mode, "all")) {
		kb_results_reset();
		kb_mode_small(b, &sm);
	}
	return 0;
}
