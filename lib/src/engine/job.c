/* SPDX-License-Identifier: MIT */
/*
 * job.c - a transfer becomes a job: its parameters checked, its file and
 * buffer found; the engine's slot consumer then plans how it moves
 * (staged.c, sink.c) and the pipeline (pipeline.c) moves it.
 */
#include <stdlib.h>
#include <string.h>

#include "engine_i.h"

/* Whether O_DIRECT is the way for @j: the hot check, the file system. */
int phx_job_direct(struct phx_engine *e, struct phx_job *j, bool *out)
{
	const struct phx_settings *s = phx_settings();
	bool is_read = j->io->op == PHX_OP_READ;
	bool direct = s->direct != PHX_DIRECT_OFF;

	(void)e;
	/* Hot: most of what will be read (up to end of file) is cached. */
	if (direct && s->direct == PHX_DIRECT_AUTO && is_read &&
	    s->hot_fraction <= 100 && j->start < j->fde->size &&
	    phx_cached_percent(j->fde->user_fd, j->start,
			       phx_min(j->end, j->fde->size) - j->start) >=
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
	*out = direct;
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

	if (io->file_off < 0 || io->len > INT64_MAX ||
	    (uint64_t)io->file_off > (uint64_t)INT64_MAX - io->len)
		return phx_err(EINVAL, "file range %lld+%llu is invalid",
			       (long long)io->file_off,
			       (unsigned long long)io->len);
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

	if (io->buf) {
		/* Reads back the range; the lock orders it against resize. */
		pthread_mutex_lock(&io->buf->lock);
		if (io->op == PHX_OP_READ)
			ret = phx_buf_commit_locked(io->buf, io->buf_off,
						    io->len);
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
