/* SPDX-License-Identifier: MIT */
/*
 * phxfio.c - libphxfio.so, a fio external I/O engine that moves the job's
 * bytes between its files and device (GPU) memory through libphoenix:
 *
 *   fio --ioengine=external:/path/libphxfio.so --phx_mode=batch ...
 *
 * Each fio job (process or thread) opens one device and allocates one
 * device buffer of iodepth slots of the largest block size; io_u N reads
 * into and writes from slot N.  phx_mode picks how transfers run:
 *
 *   sync   phx_io_run(): one blocking transfer per io_u (iodepth 1 makes
 *          sense only);
 *   batch  a libphoenix batch of depth iodepth (the default): queue
 *          queues each io_u in it (phx_batch_queue), commit starts all
 *          that fio queued since the last one with one submission, and
 *          getevents reaps every completed one there is;
 *   poll   the same batch, waiting by spinning (PHX_BATCH_POLL).
 *
 * fio's syncs (fsync=, fdatasync=, sync_file_range=, end_fsync=) are
 * fio's own calls on the file, made once what queue queued is started.
 *
 * What it deliberately does not do: fio's own buffers stay in host memory,
 * so by default the bytes written to a file are whatever the device slot
 * holds and bytes read never reach fio.  phx_hostcopy=1 copies fio's
 * buffer into the slot before each write and the slot back after each
 * read (blocking copies that count in fio's latencies), which verify=
 * needs.
 *
 * Built against the headers of the fio release it is loaded into (the
 * engine ABI is FIO_IOOPS_VERSION); libphoenix and liburing are linked in
 * and only the "ioengine" symbol is exported.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fio.h"
#include "optgroup.h"
#include "verify.h"

#include "phoenix.h"

struct phxfio_options {
	void *pad; /* fio takes an option at offset 0 as "no storage" */
	char *device;
	char *mode;
	unsigned int hostcopy;
};

enum phxfio_mode { PHXFIO_SYNC, PHXFIO_BATCH, PHXFIO_POLL };

/* One job's state (td->io_ops_data). */
struct phxfio {
	struct phx_device *dev;
	struct phx_buf *buf;
	struct phx_batch *batch; /* NULL in sync mode */
	uint64_t slot; /* bytes per io_u */
	unsigned int slots; /* io_us, one slot each */
	bool hostcopy;
	struct phx_io *ios; /* one per io_u, by io_u->index */
	struct phx_io **events; /* completed by the last getevents */
	unsigned int queued; /* by queue since the last commit */
};

/* An engine option stored in struct phxfio_options's @field. */
#define PHXFIO_OPTION(opt, long_name, opt_type, field, text)            \
	.name = (opt), .lname = (long_name), .type = (opt_type),        \
	.off1 = offsetof(struct phxfio_options, field), .help = (text), \
	.category = FIO_OPT_C_ENGINE, .group = FIO_OPT_G_INVALID

static struct fio_option options[] = {
	{
		PHXFIO_OPTION("phx_device", "Phoenix device", FIO_OPT_STR_STORE,
			      device,
			      "Device to move data into: gpu0, cuda:1, sim0 "
			      "(default: device 0 of the default kind)"),
	},
	{
		PHXFIO_OPTION("phx_mode", "Phoenix transfer mode",
			      FIO_OPT_STR_STORE, mode,
			      "sync (phx_io_run), batch (default) or poll "
			      "(a batch that spins)"),
	},
	{
		PHXFIO_OPTION("phx_hostcopy",
			      "Copy fio's buffers to and from device memory",
			      FIO_OPT_BOOL, hostcopy,
			      "Copy fio's buffer into device memory before a "
			      "write and back after a read (verify= needs it)"),
		.def = "0",
	},
	{
		.name = NULL,
	},
};

static int parse_mode(const char *s, enum phxfio_mode *out)
{
	if (!s || !*s || !strcmp(s, "batch"))
		*out = PHXFIO_BATCH;
	else if (!strcmp(s, "sync"))
		*out = PHXFIO_SYNC;
	else if (!strcmp(s, "poll"))
		*out = PHXFIO_POLL;
	else
		return -EINVAL;
	return 0;
}

static void phxfio_cleanup(struct thread_data *td)
{
	struct phxfio *p = td->io_ops_data;

	if (!p)
		return;
	if (p->batch)
		phx_batch_destroy(p->batch);
	phx_buf_free(p->buf);
	phx_device_close(p->dev);
	free(p->ios);
	free(p->events);
	free(p);
	td->io_ops_data = NULL;
}

static int phxfio_fail(struct thread_data *td, const char *what, int err)
{
	log_err("phxfio: %s: %s (%s)\n", what, strerror(-err),
		phx_strerror_last());
	phxfio_cleanup(td);
	return 1;
}

static int phxfio_init(struct thread_data *td)
{
	struct phxfio_options *o = td->eo;
	enum phxfio_mode mode;
	struct phxfio *p;
	uint64_t bs;
	int ret;

	if (parse_mode(o->mode, &mode)) {
		log_err("phxfio: phx_mode=%s is not sync, batch or poll\n",
			o->mode);
		return 1;
	}
	if (td_trim(td)) {
		log_err("phxfio: trims are not supported: the engine moves "
			"bytes between files and device memory\n");
		return 1;
	}
	if (td->o.verify != VERIFY_NONE && !o->hostcopy) {
		log_err("phxfio: verify needs phx_hostcopy=1: the data moves "
			"between the file and device memory, and fio checks "
			"its host buffer\n");
		return 1;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		log_err("phxfio: out of host memory\n");
		return 1;
	}
	td->io_ops_data = p;
	p->hostcopy = o->hostcopy;
	p->slots = td->o.iodepth ? td->o.iodepth : 1;
	bs = td->o.max_bs[DDIR_READ];
	if (td->o.max_bs[DDIR_WRITE] > bs)
		bs = td->o.max_bs[DDIR_WRITE];
	p->slot = (bs + 4095) & ~4095ULL;
	p->ios = calloc(p->slots, sizeof(*p->ios));
	p->events = calloc(p->slots, sizeof(*p->events));
	if (!p->ios || !p->events)
		return phxfio_fail(td, "allocating the job's tables", -ENOMEM);

	ret = phx_device_open(o->device, &p->dev);
	if (ret)
		return phxfio_fail(td, "opening the device", ret);
	ret = phx_buf_alloc(p->dev, p->slot * p->slots, 0, &p->buf);
	if (ret)
		return phxfio_fail(td,
				   "allocating iodepth x bs of device "
				   "memory",
				   ret);
	if (mode != PHXFIO_SYNC) {
		ret = phx_batch_create(p->dev, p->slots,
				       mode == PHXFIO_POLL ? PHX_BATCH_POLL : 0,
				       &p->batch);
		if (ret)
			return phxfio_fail(td, "creating the batch", ret);
	}
	return 0;
}

/* After a transfer: fio's view of its result, and the host copy. */
static void phxfio_complete(struct phxfio *p, struct io_u *io_u,
			    struct phx_io *io)
{
	if (io->result < 0) {
		io_u->error = (int)-io->result;
		return;
	}
	io_u->resid = io_u->xfer_buflen - (uint64_t)io->result;
	if (p->hostcopy && io->op == PHX_OP_READ && io->result) {
		int ret = phx_memcpy_from_buf(io_u->xfer_buf, p->buf,
					      io->buf_off, io->result);

		if (ret)
			io_u->error = -ret;
	}
}

/* Start what queue queued: one submission for all of it. */
static int phxfio_commit(struct thread_data *td)
{
	struct phxfio *p = td->io_ops_data;
	int ret;

	if (!p->batch || !p->queued)
		return 0;
	ret = phx_batch_submit(p->batch, NULL, 0);
	if (ret < 0)
		return ret;
	io_u_mark_submit(td, p->queued);
	p->queued = 0;
	return 0;
}

static enum fio_q_status phxfio_queue(struct thread_data *td, struct io_u *io_u)
{
	struct phxfio *p = td->io_ops_data;
	struct phx_io *io;
	int ret;

	fio_ro_check(td, io_u);
	if (ddir_sync(io_u->ddir)) {
		/*
		 * fio's own fsync, fdatasync or sync_file_range, once what
		 * queue queued is started: as with fio's libaio engine, it
		 * covers the writes that completed before it.
		 */
		ret = phxfio_commit(td);
		if (ret < 0)
			io_u->error = -ret;
		else
			do_io_u_sync(td, io_u);
		return FIO_Q_COMPLETED;
	}
	if (io_u->ddir != DDIR_READ && io_u->ddir != DDIR_WRITE) {
		io_u->error = EINVAL; /* trims are refused by init */
		return FIO_Q_COMPLETED;
	}
	if (io_u->index >= p->slots || io_u->xfer_buflen > p->slot) {
		io_u->error = ERANGE;
		return FIO_Q_COMPLETED;
	}
	io = &p->ios[io_u->index];
	memset(io, 0, sizeof(*io));
	io->op = io_u->ddir == DDIR_READ ? PHX_OP_READ : PHX_OP_WRITE;
	io->fd = io_u->file->fd;
	io->file_off = (int64_t)io_u->offset;
	io->buf = p->buf;
	io->buf_off = io_u->index * p->slot;
	io->len = io_u->xfer_buflen;
	io->user_data = io_u;
	if (p->hostcopy && io->op == PHX_OP_WRITE) {
		ret = phx_memcpy_to_buf(p->buf, io->buf_off, io_u->xfer_buf,
					io->len);
		if (ret) {
			io_u->error = -ret;
			return FIO_Q_COMPLETED;
		}
	}
	if (!p->batch) {
		phx_io_run(p->dev, io);
		phxfio_complete(p, io_u, io);
		return FIO_Q_COMPLETED;
	}
	/* started by commit, or by getevents, with the others queued */
	ret = phx_batch_queue(p->batch, io, 1);
	if (ret < 0) {
		io_u->error = -ret;
		return FIO_Q_COMPLETED;
	}
	p->queued++;
	return FIO_Q_QUEUED;
}

static int phxfio_getevents(struct thread_data *td, unsigned int min,
			    unsigned int max, const struct timespec *t)
{
	struct phxfio *p = td->io_ops_data;
	int timeout = t ? (int)(t->tv_sec * 1000 + t->tv_nsec / 1000000) : -1;
	int n, i;

	if (max > p->slots)
		max = p->slots;
	n = phx_batch_wait(p->batch, min, p->events, max, timeout);
	if (n < 0) {
		td_verror(td, -n, "phx_batch_wait");
		return n;
	}
	for (i = 0; i < n; i++)
		phxfio_complete(p, p->events[i]->user_data, p->events[i]);
	return n;
}

static struct io_u *phxfio_event(struct thread_data *td, int event)
{
	struct phxfio *p = td->io_ops_data;

	return p->events[event]->user_data;
}

__attribute__((visibility("default"))) struct ioengine_ops ioengine = {
	.name = "phx",
	.version = FIO_IOOPS_VERSION,
	/*
	 * io_submit_mode=offload queues on worker threads whose engine
	 * instance has one slot, with io_us numbered for the job's iodepth.
	 */
	.flags = FIO_NO_OFFLOAD,
	.init = phxfio_init,
	.queue = phxfio_queue,
	.commit = phxfio_commit,
	.getevents = phxfio_getevents,
	.event = phxfio_event,
	.cleanup = phxfio_cleanup,
	.open_file = generic_open_file,
	.close_file = generic_close_file,
	.get_file_size = generic_get_file_size,
	.options = options,
	.option_struct_size = sizeof(struct phxfio_options),
};
