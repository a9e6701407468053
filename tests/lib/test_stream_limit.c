/* SPDX-License-Identifier: MIT */
/*
 * test_stream_limit.c - how many stream-ordered transfers "device" and
 * "kernel" modes queue at once.
 *
 * The first transfer reads from a file on a small FUSE file system served
 * by this process, whose read does not answer until the test lets it.  That
 * holds the stream at the first transfer for as long as the test needs,
 * while every later transfer waits behind it holding one of the device's
 * flags.
 */
#include "testfs.h"
#include "util.h"

#define HELD_SIZE 4096
#define HELD_BYTE 0x5a

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool released;
	bool reading; /* a read has reached the file system */
	bool timed_out; /* the watchdog released it */
} held = { .lock = PTHREAD_MUTEX_INITIALIZER,
	   .cond = PTHREAD_COND_INITIALIZER };

static void held_read(fuse_req_t req, size_t size, off_t off)
{
	static char data[HELD_SIZE];

	pthread_mutex_lock(&held.lock);
	held.reading = true;
	pthread_cond_broadcast(&held.cond);
	while (!held.released)
		pthread_cond_wait(&held.cond, &held.lock);
	pthread_mutex_unlock(&held.lock);
	memset(data, HELD_BYTE, sizeof(data));
	if (off >= HELD_SIZE)
		size = 0;
	else if (size > (size_t)(HELD_SIZE - off))
		size = (size_t)(HELD_SIZE - off);
	fuse_reply_buf(req, data, size);
}

static void release_held(void)
{
	pthread_mutex_lock(&held.lock);
	held.released = true;
	pthread_cond_broadcast(&held.cond);
	pthread_mutex_unlock(&held.lock);
}

/* "held": every read waits for release_held() */
static struct testfs fs = { .name = "held",
			    .size = HELD_SIZE,
			    .direct_io = true,
			    .read = held_read };

/*
 * A driver may block an enqueue while the stream's own queue is full,
 * before the library's limit is reached; the test would then wait for
 * itself.  The watchdog lets the read go after a while so that the test
 * fails with the count it reached instead of hanging.
 */
static void *held_watchdog(void *arg)
{
	struct timespec until;

	(void)arg;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 30;
	pthread_mutex_lock(&held.lock);
	while (!held.released)
		if (pthread_cond_timedwait(&held.cond, &held.lock, &until) ==
		    ETIMEDOUT) {
			held.timed_out = true;
			held.released = true;
			pthread_cond_broadcast(&held.cond);
		}
	pthread_mutex_unlock(&held.lock);
	return NULL;
}

/*
 * A failed assertion leaves the file system mounted, maybe with the held
 * file still open: detach it and let the process's exit end the session
 * (the loop would not see the unmount while the file is open).
 */
static void held_fini(void)
{
	release_held();
	testfs_detach(&fs);
}

/*
 * The limit phoenix.h documents, spread over streams: a CUDA stream takes
 * only so many operations before queueing blocks, so one stream alone
 * would never reach it; 32 transfers a stream stay well below that.
 */
#define QUEUE_LIMIT 4096
#define NSTREAMS 128
#define PER_STREAM (QUEUE_LIMIT / NSTREAMS)
#define CHUNK 512

/* Queue read @i of stream @st: the held file first, then chunks of @fd. */
static int queue_one(struct phx_stream *st, struct phx_buf *buf, int hfd,
		     int fd, unsigned int i, int64_t *foff, int64_t *boff,
		     int64_t *done)
{
	static const uint64_t held_len = HELD_SIZE, len = CHUNK;
	unsigned int k = i % PER_STREAM, j = i - i / PER_STREAM - 1;

	done[i] = -1;
	if (!k) {
		foff[i] = boff[i] = 0;
		return phx_io_enqueue(st, PHX_OP_READ, hfd, phx_buf_dptr(buf),
				      &held_len, &foff[i], &boff[i], &done[i]);
	}
	/* the j-th chunk of the file, after the held bytes */
	foff[i] = (int64_t)j * CHUNK;
	boff[i] = HELD_SIZE + (int64_t)j * CHUNK;
	return phx_io_enqueue(st, PHX_OP_READ, fd, phx_buf_dptr(buf), &len,
			      &foff[i], &boff[i], &done[i]);
}

static void refuses_past_its_queue_limit_and_loses_nothing(const char *mode)
{
	const size_t nchunks = QUEUE_LIMIT - NSTREAMS,
		     span = HELD_SIZE + nchunks * CHUNK;
	struct phx_settings s;
	struct phx_device *dev;
	struct phx_stream *st[NSTREAMS];
	struct phx_buf *buf;
	uint64_t len = CHUNK;
	int64_t *foff, *boff, *done, extra_off = 0, extra_done = -1;
	unsigned char *data, *back;
	unsigned int i;
	int fd, hfd, ret = 0;
	pthread_t watchdog;
	bool stuck;

	setenv("PHX_STREAM_WAIT", mode, 1);
	phx_settings_get(&s);
	cr_assert_eq(s.stream_wait, strcmp(mode, "device") ? 2 : 1);
	dev = open_default();
	/*
	 * On CUDA, a full stream queue blocks phx_io_enqueue() inside the
	 * driver, and device mode's workers then wait for the same driver
	 * for their copies: the hang README's "Known problems" describes.
	 */
	if (!strcmp(mode, "device") && phx_device_kind(dev) == PHX_DEVICE_CUDA)
		cr_skip_test("device mode on CUDA can hang with full queues");
	testfs_mount(&fs);
	fd = make_file(dir_direct(), nchunks * CHUNK, 91, false,
		       (void **)&data);
	hfd = open(fs.path, O_RDONLY);
	cr_assert_geq(hfd, 0, "open %s: %s", fs.path, strerror(errno));
	cr_assert_eq(phx_buf_alloc(dev, span, 0, &buf), 0, "%s",
		     phx_strerror_last());
	for (i = 0; i < NSTREAMS; i++)
		cr_assert_eq(phx_stream_create(dev, &st[i]), 0, "%s",
			     phx_strerror_last());
	foff = xmalloc(QUEUE_LIMIT * sizeof(*foff));
	boff = xmalloc(QUEUE_LIMIT * sizeof(*boff));
	done = xmalloc(QUEUE_LIMIT * sizeof(*done));

	/* the first transfer reaches the file system and stays there */
	cr_assert_eq(queue_one(st[0], buf, hfd, fd, 0, foff, boff, done), 0,
		     "%s", phx_strerror_last());
	pthread_mutex_lock(&held.lock);
	while (!held.reading)
		pthread_cond_wait(&held.cond, &held.lock);
	pthread_mutex_unlock(&held.lock);
	cr_assert_eq(pthread_create(&watchdog, NULL, held_watchdog, NULL), 0);

	/* every stream starts with a held read; queue up to the limit */
	for (i = 1; i < QUEUE_LIMIT; i++) {
		ret = queue_one(st[i / PER_STREAM], buf, hfd, fd, i, foff, boff,
				done);
		if (ret)
			break;
	}
	pthread_mutex_lock(&held.lock);
	stuck = held.timed_out;
	pthread_mutex_unlock(&held.lock);
	cr_assert(!stuck, "queueing blocked for 30 s at transfer %u of %d", i,
		  QUEUE_LIMIT);
	cr_assert_eq(ret, 0, "refused at transfer %u of %d: %s", i, QUEUE_LIMIT,
		     phx_strerror_last());
	ret = phx_io_enqueue(st[0], PHX_OP_READ, fd, phx_buf_dptr(buf), &len,
			     &extra_off, &extra_off, &extra_done);
	cr_assert_eq(ret, -EBUSY, "transfer %d: %d (%s)", QUEUE_LIMIT + 1, ret,
		     phx_strerror_last());
	cr_assert(strstr(phx_strerror_last(), "already queued"), "%s",
		  phx_strerror_last());
	cr_assert_eq(extra_done, -1, "a refused transfer reported a result");
	/* nothing behind a held read has run: the streams are still held */
	for (i = 0; i < QUEUE_LIMIT; i++)
		if (i % PER_STREAM)
			cr_assert_eq(done[i], -1, "transfer %u ran early", i);

	release_held();
	pthread_join(watchdog, NULL);
	cr_assert(!held.timed_out, "the watchdog released the reads");
	for (i = 0; i < NSTREAMS; i++)
		cr_assert_eq(phx_stream_sync(st[i]), 0, "%s",
			     phx_strerror_last());
	for (i = 0; i < QUEUE_LIMIT; i++)
		cr_assert_eq(done[i], i % PER_STREAM ? CHUNK : HELD_SIZE,
			     "transfer %u: %lld", i, (long long)done[i]);
	back = xmalloc(span);
	cr_assert_eq(phx_memcpy_from_buf(back, buf, 0, span), 0);
	for (i = 0; i < HELD_SIZE; i++)
		cr_assert_eq(back[i], HELD_BYTE);
	cr_assert(!memcmp(back + HELD_SIZE, data, nchunks * CHUNK));

	/* the flags came back: the refused transfer can be queued now */
	cr_assert_eq(phx_io_enqueue(st[0], PHX_OP_READ, fd, phx_buf_dptr(buf),
				    &len, &extra_off, &extra_off, &extra_done),
		     0, "%s", phx_strerror_last());
	cr_assert_eq(phx_stream_sync(st[0]), 0);
	cr_assert_eq(extra_done, CHUNK);

	for (i = 0; i < NSTREAMS; i++)
		phx_stream_destroy(st[i]);
	phx_buf_free(buf);
	phx_device_close(dev);
	close(hfd);
	close(fd);
	testfs_unmount(&fs);
	free(back);
	free(data);
	free(foff);
	free(boff);
	free(done);
}

Test(stream, device_mode_refuses_past_its_queue_limit_and_loses_nothing,
     .timeout = 120, .fini = held_fini)
{
	refuses_past_its_queue_limit_and_loses_nothing("device");
}

Test(stream, kernel_mode_refuses_past_its_queue_limit_and_loses_nothing,
     .timeout = 120, .fini = held_fini)
{
	refuses_past_its_queue_limit_and_loses_nothing("kernel");
}
