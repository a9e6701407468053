/* SPDX-License-Identifier: MIT */
/*
 * job.c - a transfer becomes a job: its parameters checked, its file and
 * buffer found, and how it moves decided (O_DIRECT or the page cache,
 * staged or p2p; for a stream sink, its segments) and cut into regions.
 * The pipeline (engine.c) then moves it.
 */
#include <stdlib.h>
#include <string.h>

#include "engine_i.h"

static void job_add_region(struct job *j, uint64_t from, uint64_t to,
			   bool direct)
{
	if (from >= to)
		return;
	j->region[j->nregions].from = from;
	j->region[j->nregions].to = to;
	j->region[j->nregions].direct = direct;
	j->nregions++;
}

/* Whether O_DIRECT is the way for @j: the hot check, the file system. */
int phx_job_direct(struct phx_engine *e, struct job *j, bool *out)
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

/* Decide how a job moves its bytes and cut its file range into regions. */
static int job_plan(struct phx_engine *e, struct job *j)
{
	struct phx_device *dev = e->dev;
	bool is_read = j->io->op == PHX_OP_READ;
	uint64_t a_start = phx_align_down(j->start, PHX_DIO_ALIGN);
	uint64_t a_end = phx_align_up(j->end, PHX_DIO_ALIGN);
	bool direct;
	int ret;

	ret = phx_job_direct(e, j, &direct);
	if (ret)
		return ret;

	/* p2p: the device memory itself is DMA-able host-mapped memory. */
	if (direct && dev->ops->p2p && dev->ops->host_addr &&
	    (j->dptr - j->start) % PHX_DIO_ALIGN == 0)
		j->p2p = true;

	if (!direct) {
		ret = phx_fd_buffered(j->fde);
		if (ret < 0)
			return ret;
		job_add_region(j, j->start, j->end, false);
		return 0;
	}
	if (is_read && !j->p2p) {
		/* The aligned superset; only the asked-for bytes are copied. */
		job_add_region(j, a_start, a_end, true);
		return 0;
	}
	/*
	 * p2p reads and all direct writes: the unaligned edges go through
	 * the page cache (a p2p read must not spill past the asked-for
	 * range into device memory), the aligned middle O_DIRECT.
	 */
	a_start = phx_align_up(j->start, PHX_DIO_ALIGN);
	a_end = phx_align_down(j->end, PHX_DIO_ALIGN);
	if (a_start >= a_end) {
		a_start = j->end;
		a_end = j->end;
	}
	if (j->start != a_start || j->end != a_end) {
		ret = phx_fd_buffered(j->fde);
		if (ret < 0)
			return ret;
	}
	job_add_region(j, j->start, a_start, false);
	job_add_region(j, a_start, a_end, true);
	job_add_region(j, a_end, j->end, false);
	return 0;
}

/* Validate @io and turn it into a job for @e (and @sink, or NULL). */
int phx_job_make(struct phx_engine *e, struct phx_io *io, struct phx_sink *sink,
		 struct job **out)
{
	struct phx_device *dev = e->dev;
	struct job *j;
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
		ret = sink ? phx_sink_plan(e, j) : job_plan(e, j);
		if (ret)
			goto out_put;
		if (j->nregions)
			j->pos = j->region[0].from;
	}
	*out = j;
	return 0;
out_put:
	phx_fd_put(j->fde);
out_free:
	free(j);
	return ret;
}

int phx_job_start(struct phx_engine *e, struct phx_io *io, struct job **out)
{
	return phx_job_make(e, io, NULL, out);
}
