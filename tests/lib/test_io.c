/* SPDX-License-Identifier: MIT */
/* test_io.c - synchronous reads and writes between files and buffers. */
#include <sys/resource.h>
#include <pthread.h>
#include <signal.h>

#include "util.h"

/* Several times the staging ring the suite runs with (1 MiB). */
static const size_t sizes[] = {
	0, 1, 4095, 4096, 4097, MiB - 1, MiB, MiB + 1, 5 * MiB + 12345,
};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

/*
 * Read @len bytes of @fd at @file_off into @buf at @buf_off; check the
 * count and the bytes against @data (the file's); return the data path.
 */
static enum phx_path read_checked(struct phx_device *dev, int fd,
				  size_t file_off, struct phx_buf *buf,
				  size_t buf_off, size_t len, const void *data)
{
	struct phx_io io = {
		.op = PHX_OP_READ,
		.fd = fd,
		.file_off = (int64_t)file_off,
		.buf = buf,
		.buf_off = buf_off,
		.len = len,
	};
	int64_t got = phx_io_run(dev, &io);

	cr_assert_eq(got, (int64_t)len, "read %zu at %zu: got %lld: %s", len,
		     file_off, (long long)got, phx_strerror_last());
	assert_buf_eq(buf, buf_off, (const char *)data + file_off, len);
	return io.path;
}

/*
 * Read @len bytes at a random file offset into a random buffer offset;
 * check the bytes, the count (short at EOF) and the data path.
 */
static void read_case(const char *dir, size_t len, uint64_t seed, bool cold,
		      enum phx_path want_path)
{
	struct phx_device *dev = open_default();
	uint64_t s = seed;
	size_t file_off = len ? rnd_next(&s) % 9000 : 0;
	size_t buf_off = rnd_next(&s) % 5000;
	size_t fsize = file_off + len;
	struct phx_buf *buf;
	void *data;
	int64_t got;
	int fd;

	fd = make_file(dir, fsize, seed, cold, &data);
	buf = buf_new(dev, buf_off + len + 100, 0);
	struct phx_io io = {
		.op = PHX_OP_READ, .fd = fd, .buf = buf, .buf_off = buf_off
	};

	io.path = read_checked(dev, fd, file_off, buf, buf_off, len, data);
	if (len && want_path == PHX_PATH_NONE)
		cr_expect(io.path == PHX_PATH_STAGED ||
				  io.path == PHX_PATH_BUFFERED,
			  "path %s", phx_path_name(io.path));
	else if (len)
		cr_expect_eq(io.path, want_path, "path %s, expected %s",
			     phx_path_name(io.path), phx_path_name(want_path));
	else
		cr_expect_eq(io.path, PHX_PATH_NONE);

	/* past EOF: short read of what is there, then 0 */
	io.file_off = (int64_t)(fsize > 10 ? fsize - 10 : 0);
	io.len = len;
	got = phx_io_run(dev, &io);
	cr_assert_eq(got, (int64_t)phx_min_sz(len, fsize - (size_t)io.file_off),
		     "short read at EOF: %lld", (long long)got);
	io.file_off = (int64_t)fsize + 5000;
	cr_assert_eq(phx_io_run(dev, &io), 0, "read past EOF");

	phx_buf_free(buf);
	phx_device_close(dev);
	close(fd);
	free(data);
}

/*
 * Cold reads go O_DIRECT; one of four staging sizes or more probes the
 * file system and may find the page cache faster (test_probe.c).
 */
Test(io, read_sizes_cold_direct)
{
	struct phx_settings set;

	phx_settings_get(&set);
	for (size_t i = 0; i < NSIZES; i++)
		read_case(dir_direct(), sizes[i], 100 + i, true,
			  sizes[i] < 4 * set.staging_size ? PHX_PATH_STAGED :
							    PHX_PATH_NONE);
}

Test(io, read_sizes_hot)
{
	for (size_t i = 0; i < NSIZES; i++)
		read_case(dir_direct(), sizes[i], 200 + i, false,
			  PHX_PATH_BUFFERED);
}

Test(io, read_sizes_tmpfs)
{
	for (size_t i = 0; i < NSIZES; i++)
		read_case(dir_tmpfs(), sizes[i], 300 + i, false,
			  PHX_PATH_BUFFERED);
}

/* Write @len bytes from a buffer to a file at random offsets, read back. */
static void write_case(const char *dir, size_t len, uint64_t seed)
{
	struct phx_device *dev = open_default();
	uint64_t s = seed;
	size_t file_off = rnd_next(&s) % 9000;
	size_t buf_off = rnd_next(&s) % 5000;
	unsigned char *data = xmalloc(len), *back = xmalloc(len + file_off);
	struct phx_buf *buf;
	int64_t got;
	int fd = empty_file(dir);

	fill_random(data, len, seed);
	buf = buf_new(dev, buf_off + len, PHX_BUF_SPARSE);
	cr_assert_eq(phx_memcpy_to_buf(buf, buf_off, data, len), 0);
	got = phx_write(buf, buf_off, fd, (int64_t)file_off, len);
	cr_assert_eq(got, (int64_t)len, "write %zu at %zu: %lld: %s", len,
		     file_off, (long long)got, phx_strerror_last());
	if (!len)
		file_off = 0; /* writing nothing does not extend the file */
	cr_assert_eq(pread(fd, back, len + file_off, 0),
		     (ssize_t)(len + file_off));
	for (size_t i = 0; i < file_off; i++)
		cr_assert_eq(back[i], 0, "hole before the write is not zero");
	cr_assert(!memcmp(back + file_off, data, len),
		  "file content differs after writing %zu bytes", len);

	/* round trip: read it back into another place of the buffer */
	struct phx_buf *buf2 = buf_new(dev, len, 0);

	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	got = phx_read(buf2, 0, fd, (int64_t)file_off, len);
	cr_assert_eq(got, (int64_t)len);
	assert_buf_eq(buf2, 0, data, len);

	phx_buf_free(buf2);
	phx_buf_free(buf);
	phx_device_close(dev);
	close(fd);
	free(data);
	free(back);
}

Test(io, write_sizes_direct)
{
	for (size_t i = 0; i < NSIZES; i++)
		write_case(dir_direct(), sizes[i], 400 + i);
}

Test(io, write_sizes_tmpfs)
{
	for (size_t i = 0; i < NSIZES; i++)
		write_case(dir_tmpfs(), sizes[i], 500 + i);
}

Test(io, random_offsets_round_trip)
{
	struct rig r =
		rig_open(open_default(), dir_direct(), 3 * MiB + 777, 7, true);
	size_t fsize = r.n;
	unsigned char *back = xmalloc(fsize);
	uint64_t s = 42;

	/* Fill the buffer with random pieces, each read at its own offset. */
	for (int i = 0; i < 200; i++) {
		size_t off = rnd_next(&s) % fsize;
		size_t len = rnd_next(&s) % (fsize - off) % (300 * 1024) + 1;

		cr_assert_eq(phx_read(r.buf, off, r.fd, (int64_t)off, len),
			     (int64_t)len, "piece %d: %s", i,
			     phx_strerror_last());
	}
	rig_read(&r);

	/* Write it out in random pieces to a new file; compare. */
	int out = empty_file(dir_direct());

	for (size_t off = 0; off < fsize;) {
		size_t len = phx_min_sz(rnd_next(&s) % (700 * 1024) + 1,
					fsize - off);

		cr_assert_eq(phx_write(r.buf, off, out, (int64_t)off, len),
			     (int64_t)len);
		off += len;
	}
	cr_assert_eq(pread(out, back, fsize, 0), (ssize_t)fsize);
	cr_assert(!memcmp(back, r.data, fsize));
	close(out);
	free(back);
	rig_close(&r);
}

Test(io, o_direct_fd_from_caller)
{
	struct rig r =
		rig_file(open_default(), dir_direct(), 2 * MiB + 99, 9, true);
	size_t fsize = r.n;
	/* The caller opened it O_DIRECT itself (as LMCache does). */
	int dfd = reopen(r.fd, O_RDWR | O_DIRECT);

	cr_assert_geq(dfd, 0);
	r.buf = buf_new(r.dev, fsize, 0);
	cr_assert_eq(phx_read(r.buf, 3, dfd, 5, fsize - 5), (int64_t)fsize - 5,
		     "%s", phx_strerror_last());
	assert_buf_eq(r.buf, 3, r.data + 5, fsize - 5);
	/* unaligned write through an O_DIRECT fd: edges need the page cache */
	cr_assert_eq(phx_write(r.buf, 3, dfd, 11, 100000), 100000, "%s",
		     phx_strerror_last());
	char *back = xmalloc(100000);

	cr_assert_eq(pread(r.fd, back, 100000, 11), 100000);
	cr_assert(!memcmp(back, r.data + 5, 100000));
	close(dfd);
	free(back);
	rig_close(&r);
}

/* ---- errors --------------------------------------------------------- */

Test(io_errors, bad_fd)
{
	struct phx_device *dev = open_default();
	struct phx_buf *buf = buf_new(dev, 4096, 0);

	cr_assert_eq(phx_read(buf, 0, 12345, 0, 10), -EBADF);
	cr_assert_str_not_empty(phx_strerror_last());
	cr_assert_eq(phx_read(buf, 0, -1, 0, 10), -EBADF);

	int wfd = open("/dev/null", O_WRONLY);
	int fd = make_file(dir_direct(), 100, 1, false, NULL);
	int rfd = reopen(fd, O_RDONLY);

	cr_assert_eq(phx_read(buf, 0, wfd, 0, 10), -EBADF,
		     "reading a write-only fd");
	cr_assert_eq(phx_write(buf, 0, rfd, 0, 10), -EBADF,
		     "writing a read-only fd");
	cr_assert(strstr(phx_strerror_last(), "not open for writing"));
	phx_buf_free(buf);
	phx_device_close(dev);
}

/*
 * The engine reopens a descriptor through /proc/self/fd for the other
 * mode (O_DIRECT or the page cache); that must never give more access
 * than the caller's descriptor has: an O_PATH descriptor reads and
 * writes nothing, and a write-only one is written, not read.
 */
Test(io_errors, reopen_never_widens)
{
	struct phx_device *dev = open_default();
	struct phx_buf *buf = buf_new(dev, 2 * MiB, 0);
	int fd = make_file(dir_direct(), 2 * MiB, 7, true, NULL);
	int pfd = reopen(fd, O_PATH);
	int wfd = reopen(fd, O_WRONLY);

	cr_assert_geq(pfd, 0);
	cr_assert_geq(wfd, 0);
	cr_assert_eq(phx_read(buf, 0, pfd, 0, 2 * MiB), -EBADF,
		     "reading an O_PATH fd");
	cr_assert(strstr(phx_strerror_last(), "not open for reading"));
	cr_assert_eq(phx_write(buf, 0, pfd, 0, 2 * MiB), -EBADF,
		     "writing an O_PATH fd");
	cr_assert_eq(phx_read(buf, 0, wfd, 0, 2 * MiB), -EBADF,
		     "reading a write-only fd");
	/* a write-only fd is still written, O_DIRECT or not */
	cr_assert_eq(phx_write(buf, 0, wfd, 0, 2 * MiB), (int64_t)(2 * MiB),
		     "%s", phx_strerror_last());
	cr_assert_eq(phx_write(buf, 5, wfd, 11, 100000), 100000, "%s",
		     phx_strerror_last());
	close(pfd);
	close(wfd);
	close(fd);
	phx_buf_free(buf);
	phx_device_close(dev);
}

/* A write to an O_APPEND descriptor is refused; the file stays as it was. */
Test(io_errors, o_append_write_refused)
{
	struct phx_device *dev = open_default();
	struct phx_buf *buf = buf_new(dev, 2 * MiB, 0);
	void *data;
	int fd = make_file(dir_direct(), MiB, 8, false, &data);
	int afd = reopen(fd, O_WRONLY | O_APPEND);
	unsigned char *back = xmalloc(MiB);
	struct stat st;

	cr_assert_geq(afd, 0);
	cr_assert_eq(phx_write(buf, 0, afd, 4096, MiB + 7), -EINVAL);
	cr_assert(strstr(phx_strerror_last(), "O_APPEND"), "%s",
		  phx_strerror_last());
	cr_assert_eq(phx_write(buf, 3, afd, 0, 100), -EINVAL);
	cr_assert_eq(fstat(fd, &st), 0);
	cr_assert_eq(st.st_size, (off_t)MiB);
	cr_assert_eq(pread(fd, back, MiB, 0), (ssize_t)MiB);
	cr_assert_arr_eq(back, data, MiB);
	/* reading through it is fine */
	close(afd);
	afd = reopen(fd, O_RDWR | O_APPEND);
	cr_assert_eq(phx_read(buf, 0, afd, 0, MiB), (int64_t)MiB, "%s",
		     phx_strerror_last());
	close(afd);
	close(fd);
	free(back);
	free(data);
	phx_buf_free(buf);
	phx_device_close(dev);
}

Test(io_errors, range_outside_buffer)
{
	struct phx_device *dev = open_default();
	struct phx_buf *buf = buf_new(dev, 4096, 0);
	int fd = make_file(dir_direct(), 8192, 1, false, NULL);

	cr_assert_eq(phx_read(buf, 0, fd, 0, 4097), -ERANGE);
	cr_assert_eq(phx_read(buf, 4000, fd, 0, 97), -ERANGE);
	cr_assert_eq(phx_read(buf, UINT64_MAX, fd, 0, 2), -ERANGE);
	cr_assert_eq(phx_write(buf, 1, fd, 0, UINT64_MAX), -ERANGE);
	cr_assert_eq(phx_read(buf, 0, fd, -1, 10), -EINVAL);
	cr_assert_eq(phx_read(buf, 0, fd, INT64_MAX, 10), -EINVAL);
	cr_assert(strstr(phx_strerror_last(), "invalid"));
	char tmp[8];

	cr_assert_eq(phx_memcpy_from_buf(tmp, buf, 4090, 8), -ERANGE);
	cr_assert_eq(phx_memcpy_to_buf(buf, 4095, tmp, 2), -ERANGE);
	phx_buf_free(buf);
	phx_device_close(dev);
}

Test(io_errors, not_a_file)
{
	struct phx_device *dev = open_default();
	struct phx_buf *buf = buf_new(dev, 4096, 0);
	int p[2];

	cr_assert_eq(pipe(p), 0);
	cr_assert_eq(phx_read(buf, 0, p[0], 0, 10), -EINVAL);
	cr_assert(strstr(phx_strerror_last(), "not a regular file"));
	phx_buf_free(buf);
	phx_device_close(dev);
}

Test(io_errors, o_direct_refused)
{
	struct phx_device *dev;
	struct phx_buf *buf;
	int fd;

	setenv("PHX_DIRECT", "on", 1);
	dev = open_default();
	/* procfs files cannot be opened O_DIRECT */
	fd = open("/proc/self/status", O_RDONLY);
	buf = buf_new(dev, 4096, 0);
	cr_assert_eq(phx_read(buf, 0, fd, 0, 100), -EINVAL);
	cr_assert(strstr(phx_strerror_last(), "O_DIRECT"), "message: %s",
		  phx_strerror_last());
	phx_buf_free(buf);
	phx_device_close(dev);
}

Test(io_errors, write_fails_in_the_kernel)
{
	struct phx_device *dev = open_default();
	struct rlimit rl = { MiB, MiB };
	struct phx_buf *buf = buf_new(dev, 4 * MiB, 0);
	int fd = empty_file(dir_direct());

	/* The file size limit makes the kernel itself fail the write. */
	signal(SIGXFSZ, SIG_IGN);
	cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
	cr_assert_eq(phx_write(buf, 0, fd, 2 * MiB, MiB), -EFBIG, "%s",
		     phx_strerror_last());
	cr_assert(strstr(phx_strerror_last(), "writing fd"));
	phx_buf_free(buf);
	phx_device_close(dev);
}

Test(io, hot_file_shorter_than_the_request)
{
	struct phx_device *dev = open_default();
	void *data;
	int fd = make_file(dir_direct(), 300000, 71, false, &data);
	/* ask for far more than the file holds: hotness is about the file */
	struct phx_buf *buf = buf_new(dev, 64 * MiB, 0);
	struct phx_io io = {
		.op = PHX_OP_READ, .fd = fd, .buf = buf, .len = 64 * MiB
	};

	cr_assert_eq(phx_io_run(dev, &io), 300000);
	cr_assert_eq(io.path, PHX_PATH_BUFFERED, "path %s",
		     phx_path_name(io.path));
	assert_buf_eq(buf, 0, data, 300000);
	phx_buf_free(buf);
	phx_device_close(dev);
	close(fd);
	free(data);
}

/*
 * A hot read of more than a slot re-cuts its engine into smaller slots; a
 * cold read after it, and a hot one after that, find the same engine cut
 * as each needs: the bytes are right and no engine is built for it.  Slots
 * larger than a hot one's, and a read shorter than four stagings (no
 * probe: the cold read goes O_DIRECT).
 */
Test(io, hot_and_cold_reads_share_one_engine)
{
	setenv("PHX_CHUNK_SIZE", "4M", 1);
	setenv("PHX_STAGING_SIZE", "16M", 1);
	struct phx_device *dev = open_default();
	size_t len = 40 * MiB + 777, file_off = 4097, buf_off = 123;
	enum phx_path want[] = { PHX_PATH_BUFFERED, PHX_PATH_STAGED,
				 PHX_PATH_BUFFERED };
	uint64_t built = 0;
	void *data;
	int fd = make_file(dir_direct(), file_off + len, 91, false, &data);

	for (unsigned int i = 0; i < 3; i++) {
		/* a new buffer each time: none holds the last read's bytes */
		struct phx_buf *buf = buf_new(dev, buf_off + len, 0);
		enum phx_path path;

		if (want[i] == PHX_PATH_STAGED) {
			fsync(fd);
			posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		} else if (i) { /* O_DIRECT left it cold: read it in */
			void *back = xmalloc(file_off + len);

			cr_assert_eq(pread(fd, back, file_off + len, 0),
				     (ssize_t)(file_off + len));
			free(back);
		}
		path = read_checked(dev, fd, file_off, buf, buf_off, len, data);
		cr_expect_eq(path, want[i], "read %u: path %s", i,
			     phx_path_name(path));
		phx_buf_free(buf);
		if (!i)
			built = engine_stats(dev).built;
	}
	cr_assert_eq(engine_stats(dev).built, built,
		     "the cold and hot reads after the first built engines");
	phx_device_close(dev);
	close(fd);
	free(data);
}

/*
 * Read @len bytes at @file_off of a hot file of @fsize bytes into a new
 * buffer at @buf_off, @times times, with 4 MiB of staging: eight readers
 * (as many as it holds at two 256 KiB slots each; the default asks for
 * more).  Each read moves
 * what the file holds of the range, by the page cache; @threaded of them
 * ran on the reader threads, and none built an engine after the first.
 */
static void threaded_case(const char *dir, size_t fsize, size_t file_off,
			  size_t buf_off, size_t len, unsigned int times,
			  uint64_t threaded)
{
	setenv("PHX_STAGING_SIZE", "4M", 1);
	struct phx_device *dev = open_default();
	size_t want = phx_min_sz(len, fsize - file_off);
	uint64_t built = 0;
	void *data;
	int fd = make_file(dir, fsize, 95 + times, false, &data);

	for (unsigned int i = 0; i < times; i++) {
		struct phx_buf *buf = buf_new(dev, buf_off + len, 0);
		struct phx_io io = { .op = PHX_OP_READ,
				     .fd = fd,
				     .file_off = (int64_t)file_off,
				     .buf = buf,
				     .buf_off = buf_off,
				     .len = len };

		cr_assert_eq(phx_io_run(dev, &io), (int64_t)want, "%s",
			     phx_strerror_last());
		cr_assert_eq(io.path, PHX_PATH_BUFFERED);
		assert_buf_eq(buf, buf_off, (char *)data + file_off, want);
		phx_buf_free(buf);
		if (!i)
			built = engine_stats(dev).built;
	}
	cr_assert_eq(engine_stats(dev).threaded_reads, threaded);
	cr_assert_eq(engine_stats(dev).built, built);
	phx_device_close(dev);
	close(fd);
	free(data);
}

/*
 * A hot read at least as long as the staging runs on the engine's reader
 * threads, at unaligned offsets on both sides; the second reuses the
 * engine and its threads.
 */
Test(io, long_hot_read_runs_on_reader_threads)
{
	threaded_case(dir_direct(), 4097 + 24 * MiB + 777, 4097, 123,
		      24 * MiB + 777, 2, 2);
}

/* Asked for more than the file holds: what it holds, from every reader. */
Test(io, threaded_read_stops_at_end_of_file)
{
	threaded_case(dir_tmpfs(), 9 * MiB + 5, 1000, 0, 20 * MiB, 1, 1);
}

/* PHX_HOT_READERS=0: the same read on the pipeline's one thread. */
Test(io, hot_readers_off_reads_on_the_pipeline)
{
	setenv("PHX_HOT_READERS", "0", 1);
	threaded_case(dir_direct(), 12 * MiB + 3, 0, 0, 12 * MiB + 3, 1, 0);
}

struct hot_reader_arg {
	struct phx_device *dev;
	struct phx_buf *buf;
	int fd;
	size_t len;
	int64_t got;
};

static void *hot_reader(void *p)
{
	struct hot_reader_arg *a = p;

	a->got = phx_read(a->buf, 0, a->fd, 0, a->len);
	return NULL;
}

/* Two threads' long hot reads at once, each on an engine of its own. */
Test(io, threaded_reads_of_two_callers_at_once)
{
	setenv("PHX_STAGING_SIZE", "4M", 1);
	struct phx_device *dev = open_default();
	size_t len = 16 * MiB + 4321;
	struct hot_reader_arg a[2];
	pthread_t t[2];
	void *data;
	int fd = make_file(dir_tmpfs(), len, 98, false, &data);

	for (int i = 0; i < 2; i++) {
		a[i] = (struct hot_reader_arg){ .dev = dev,
						.buf = buf_new(dev, len, 0),
						.fd = fd,
						.len = len };
		cr_assert_eq(pthread_create(&t[i], NULL, hot_reader, &a[i]), 0);
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(a[i].got, (int64_t)len);
		assert_buf_eq(a[i].buf, 0, data, len);
		phx_buf_free(a[i].buf);
	}
	cr_assert_eq(engine_stats(dev).threaded_reads, 2);
	phx_device_close(dev);
	close(fd);
	free(data);
}
