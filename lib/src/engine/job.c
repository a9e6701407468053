/* SPDX-License-Identifier: MIT */
/*
 * job.c - a transfer becomes a job: its parameters checked, its file and
 * buffer found; the engine's slot consumer then plans how it moves
 * (staged.c, sink.c) and the pipeline (pipeline.c) moves it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine_i.h"

/*
 * What probes found, per file system (st_dev): whether O_DIRECT reads
 * beat the page cache's on it.  A local disk behind a VM may read faster
 * buffered (the host's readahead), an NVMe array O_DIRECT; each process
 * probes each of its file systems once, with the first cold read that is
 * long enough (staged.c), and the slots past PHX_PROBED go unremembered.
 */
#define PHX_PROBED 16

static struct {
	dev_t st_dev;
	bool direct_faster;
} probed[PHX_PROBED];
static unsigned int nprobed;
static pthread_mutex_t probed_lock = PTHREAD_MUTEX_INITIALIZER;

/* 1: O_DIRECT is faster on @st_dev, 0: the page cache, -1: not probed. */
static int probe_lookup(dev_t st_dev)
{
	int found = -1;

	pthread_mutex_lock(&probed_lock);
	for (unsigned int i = 0; i < nprobed; i++)
		if (probed[i].st_dev == st_dev)
			found = probed[i].direct_faster;
	pthread_mutex_unlock(&probed_lock);
	return found;
}

void phx_probe_record(dev_t st_dev, bool direct_faster)
{
	unsigned int i;

	pthread_mutex_lock(&probed_lock);
	for (i = 0; i < nprobed && probed[i].st_dev != st_dev; i++)
		;
	if (i < PHX_PROBED) {
		probed[i].st_dev = st_dev;
		probed[i].direct_faster = direct_faster;
		if (i == nprobed)
			nprobed++;
	}
	pthread_mutex_unlock(&probed_lock);
}

uint64_t phx_probe_len(const struct phx_engine *e)
{
	return phx_max((uint64_t)e->nslots * e->chunk, 16 * PHX_PAGE);
}

int phx_job_direct(struct phx_engine *e, struct phx_job *j, bool *out,
		   bool *probe)
{
	const struct phx_settings *s = phx_settings();
	bool is_read = j->io->op == PHX_OP_READ;
	bool direct = s->direct != PHX_DIRECT_OFF;
	uint64_t len = 0;
	int faster;

	if (probe)
		*probe = false;
	if (j->start < j->fde->size)
		len = phx_min(j->end, j->fde->size) - j->start;
	/* Hot: most of what will be read (up to end of file) is cached. */
	if (direct && s->direct == PHX_DIRECT_AUTO && is_read &&
	    s->hot_fraction <= 100 && len &&
	    phx_cached_percent(j->fde->user_fd, j->start, len) >=
		    s->hot_fraction)
		direct = false;
	if (direct && phx_fd_direct(j->fde) < 0) {
		if (s->direct == PHX_DIRECT_ON)
			return phx_err(
				EINVAL,
				"fd %d cannot be opened with O_DIRECT (PHX_DIRECT=on): the file system refuses it",
				j->fde->user_fd);
		direct = false;
	}
	/* Cold, and both ways open: the faster on this file system. */
	if (direct && s->direct == PHX_DIRECT_AUTO && is_read) {
		faster = probe_lookup(j->fde->st_dev);
		if (faster >= 0)
			direct = faster;
		else if (probe && len >= 4 * phx_probe_len(e) &&
			 !phx_cached_percent(j->fde->user_fd, j->start,
					     2 * phx_probe_len(e)) &&
			 phx_fd_buffered(j->fde) >= 0)
			*probe = true; /* both parts cold: a fair race */
		phx_err_clear();
	}
	*out = direct;
	return 0;
}

int phx_file_range_check(int64_t file_off, uint64_t len)
{
	if (file_off < 0 || len > INT64_MAX ||
	    (uint64_t)file_off > (uint64_t)INT64_MAX - len)
		return phx_err(EINVAL, "file range %lld+%llu is invalid",
			       (long long)file_off, (unsigned long long)len);
	return 0;
}

int phx_job_make(struct phx_engine *e, struct phx_io *io, struct phx_sink *sink,
		 struct phx_job **out)
{
	struct phx_device *dev = e->dev;
	struct phx_job *j;
	int ret;

	io->result = 0;
	io->path = PHX_PATH_NONE;
	if (io->op != PHX_OP_READ && io->op != PHX_OP_WRITE)
		return phx_err(EINVAL, "unknown transfer op %d", (int)io->op);
	if (io->buf) {
		if (io->buf->dev != dev)
			return phx_err(EINVAL, "buffer is on %s, not on %s",
				       io->buf->dev->name, dev->name);
		ret = phx_buf_check_range(io->buf, io->buf_off, io->len);
		if (ret)
			return ret;
	} else if (!io->dptr && io->len) {
		return phx_err(
			EFAULT,
			"transfer has neither a buffer nor a device address");
	}

	ret = phx_file_range_check(io->file_off, io->len);
	if (ret)
		return ret;
	j = calloc(1, sizeof(*j));
	if (!j)
		return phx_err(ENOMEM, "out of host memory for a transfer");
	j->io = io;
	if (sink)
		j->sink = sink;
	j->buf = io->buf;
	j->start = (uint64_t)io->file_off;
	j->end = j->start + io->len;

	/* -EAGAIN: every file slot is busy; the caller drains and retries */
	ret = phx_fd_get(e->fds, io->fd, io->op, &j->fde);
	if (ret)
		goto out_free;

	/*
	 * A read into a buffer moves no byte past the end the file has
	 * now: a sparse buffer is backed for the bytes that come, never for
	 * the rest of a length asked past the end, and a file growing
	 * meanwhile cannot bring bytes to memory that was not backed.  (A
	 * sink's stream waits for the segments of the length as queued.)
	 */
	if (io->op == PHX_OP_READ && io->buf && !sink)
		j->end = j->start < j->fde->size ?
				 phx_min(j->end, j->fde->size) :
				 j->start;
	if (io->buf) {
		/* Reads back the range; the lock orders it against resize. */
		pthread_mutex_lock(&io->buf->lock);
		if (io->op == PHX_OP_READ)
			ret = phx_buf_commit_locked(io->buf, io->buf_off,
						    j->end - j->start);
		j->dptr = io->buf->dptr + io->buf_off;
		pthread_mutex_unlock(&io->buf->lock);
		if (ret)
			goto out_put;
	} else {
		j->dptr = io->dptr;
	}
	if (io->len) {
		ret = e->consumer->plan(e, j);
		if (ret)
			goto out_put;
	}
	*out = j;
	return 0;
out_put:
	phx_fd_put(j->fde);
out_free:
	free(j);
	return ret;
}
