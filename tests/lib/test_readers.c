/* SPDX-License-Identifier: MIT */
/*
 * test_readers.c - a long read on the engine's reader threads that its
 * file system fails: the failing job ends with the file system's error
 * and says where, the jobs beside it keep their bytes, and the engine
 * reads on.
 *
 * The file is served by this process over FUSE through the page cache
 * (readers take only buffered reads): its bytes are a pattern of their
 * offset up to BAD_AT; a read that reaches past BAD_AT gets EIO.
 */
#include <dirent.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "testfs.h"
#include "util.h"

#define BAD_SIZE (12 * MiB)
#define BAD_AT (9 * MiB)
/* far enough below BAD_AT that no request of the kernel's spans both */
#define GOOD_LEN (8 * MiB)

static atomic_uint failed_reads;

static unsigned char pattern(uint64_t off)
{
	return (unsigned char)(off * 131 + (off >> 12) + 1);
}

static void bad_read(fuse_req_t req, size_t size, off_t off)
{
	uint64_t end = phx_min_sz((uint64_t)off + size, BAD_SIZE);
	unsigned char *data;

	if ((uint64_t)off >= BAD_SIZE) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	if (end > BAD_AT) {
		atomic_fetch_add(&failed_reads, 1);
		fuse_reply_err(req, EIO);
		return;
	}
	data = malloc(end - (uint64_t)off);
	if (!data) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	for (uint64_t i = (uint64_t)off; i < end; i++)
		data[i - (uint64_t)off] = pattern(i);
	fuse_reply_buf(req, (char *)data, end - (uint64_t)off);
	free(data);
}

static struct testfs fs = { .name = "bad", .size = BAD_SIZE, .read = bad_read };

static void bad_fini(void)
{
	testfs_detach(&fs);
}

/* The device and the mounted file, with 4 MiB of staging: eight readers. */
static struct phx_device *bad_open(int *fd)
{
	struct phx_device *dev;

	setenv("PHX_STAGING_SIZE", "4M", 1);
	setenv("PHX_DIRECT", "off", 1); /* through the page cache */
	dev = open_default();
	testfs_mount(&fs);
	*fd = open(fs.path, O_RDONLY);
	cr_assert_geq(*fd, 0, "open %s: %s", fs.path, strerror(errno));
	return dev;
}

static void assert_pattern(struct phx_buf *buf, uint64_t buf_off,
			   uint64_t file_off, size_t len)
{
	unsigned char *want = xmalloc(len);

	for (size_t i = 0; i < len; i++)
		want[i] = pattern(file_off + i);
	assert_buf_eq(buf, buf_off, want, len);
	free(want);
}

static void bad_close(struct phx_device *dev, int fd)
{
	phx_device_close(dev);
	close(fd);
	testfs_unmount(&fs);
}

Test(readers, a_failed_read_fails_its_job_and_the_engine_reads_on,
     .fini = bad_fini)
{
	int fd;
	struct phx_device *dev = bad_open(&fd);
	struct phx_buf *buf = buf_new(dev, BAD_SIZE, 0);
	struct phx_io io = {
		.op = PHX_OP_READ, .fd = fd, .buf = buf, .len = BAD_SIZE
	};
	uint64_t built;

	cr_assert_eq(phx_io_run(dev, &io), -EIO, "%s", phx_strerror_last());
	cr_assert(strstr(phx_strerror_last(), "failed: Input/output error"),
		  "%s", phx_strerror_last());
	cr_assert_gt(atomic_load(&failed_reads), 0);
	cr_assert_eq(engine_stats(dev).threaded_reads, 1);
	built = engine_stats(dev).built;

	io = (struct phx_io){
		.op = PHX_OP_READ, .fd = fd, .buf = buf, .len = GOOD_LEN
	};
	cr_assert_eq(phx_io_run(dev, &io), (int64_t)GOOD_LEN, "%s",
		     phx_strerror_last());
	cr_assert_eq(io.path, PHX_PATH_BUFFERED);
	assert_pattern(buf, 0, 0, GOOD_LEN);
	cr_assert_eq(engine_stats(dev).threaded_reads, 2);
	cr_assert_eq(engine_stats(dev).built, built, "a new engine");
	phx_buf_free(buf);
	bad_close(dev, fd);
}

/* Two long reads of a batch run together; only the one that fails fails. */
Test(readers, a_failed_read_leaves_the_batch_s_other_reads_alone,
     .fini = bad_fini)
{
	int fd;
	struct phx_device *dev = bad_open(&fd);
	struct phx_buf *buf = buf_new(dev, BAD_SIZE, 0);
	struct phx_batch *b;
	struct phx_io io[2] = {
		{ .op = PHX_OP_READ, .fd = fd, .buf = buf, .len = GOOD_LEN },
		{ .op = PHX_OP_READ,
		  .fd = fd,
		  .file_off = GOOD_LEN,
		  .buf = buf,
		  .buf_off = GOOD_LEN,
		  .len = BAD_SIZE - GOOD_LEN },
	};

	cr_assert_eq(phx_batch_create(dev, 4, 0, &b), 0, "%s",
		     phx_strerror_last());
	cr_assert_eq(phx_batch_submit(b, io, 2), 2, "%s", phx_strerror_last());
	cr_assert_eq(phx_batch_wait(b, 2, NULL, 0, -1), 2);
	cr_assert_eq(io[0].result, (int64_t)GOOD_LEN, "%lld",
		     (long long)io[0].result);
	cr_assert_eq(io[1].result, -EIO, "%lld", (long long)io[1].result);
	cr_assert_eq(engine_stats(dev).threaded_reads, 2);
	assert_pattern(buf, 0, 0, GOOD_LEN);
	phx_batch_destroy(b);
	phx_buf_free(buf);
	bad_close(dev, fd);
}

/* Threads of this process named @name. */
static unsigned int threads_named(const char *name)
{
	unsigned int n = 0;
	struct dirent *d;
	DIR *dir = opendir("/proc/self/task");

	cr_assert_not_null(dir, "/proc/self/task: %s", strerror(errno));
	while ((d = readdir(dir))) {
		char path[300], comm[64] = "";
		FILE *f;

		if (d->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm",
			 d->d_name);
		f = fopen(path, "r");
		if (!f)
			continue; /* a thread that has just ended */
		if (fgets(comm, sizeof(comm), f))
			comm[strcspn(comm, "\n")] = 0;
		fclose(f);
		n += !strcmp(comm, name);
	}
	closedir(dir);
	return n;
}

/*
 * A device with 4 MiB of staging (eight readers: the calling thread and
 * seven) under PHX_HOT_READERS=@readers, its set-up waited for: @threads
 * reader threads are there before any transfer.
 */
static struct phx_device *open_prepared(const char *readers,
					unsigned int threads)
{
	struct phx_device *dev;

	setenv("PHX_STAGING_SIZE", "4M", 1);
	setenv("PHX_HOT_READERS", readers, 1);
	dev = open_default();
	cr_assert_eq(phx_device_prepare(dev), 0, "%s", phx_strerror_last());
	cr_assert_eq(threads_named("phx-reader"), threads);
	return dev;
}

/*
 * The engine a device builds at open comes with its readers: a process's
 * first long read finds the threads there and makes none.
 */
Test(readers, are_made_with_the_engine_built_at_open)
{
	struct phx_device *dev = open_prepared("16", 7);
	size_t len = 6 * MiB + 5;
	struct phx_buf *buf = buf_new(dev, len, 0);
	void *data;
	int fd = make_file(dir_tmpfs(), len, 96, false, &data);

	cr_assert_eq(phx_read(buf, 0, fd, 0, len), (int64_t)len, "%s",
		     phx_strerror_last());
	assert_buf_eq(buf, 0, data, len);
	cr_assert_eq(engine_stats(dev).threaded_reads, 1);
	cr_assert_eq(engine_stats(dev).built, 1, "the engine built at open");
	cr_assert_eq(threads_named("phx-reader"), 7);
	phx_buf_free(buf);
	phx_device_close(dev);
	close(fd);
	free(data);
}

/* With the readers switched off the device makes none. */
Test(readers, none_are_made_when_switched_off)
{
	phx_device_close(open_prepared("0", 0));
}
