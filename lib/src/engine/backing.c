/* SPDX-License-Identifier: MIT */
/*
 * backing.c - backing files: device memory handed out as a growable
 * regular file (phx.ko's PHX_ALLOC_GROW ranges; a memfd on the simulated
 * device), the kind FUSE passthrough accepts.
 *
 * The file's size starts at 0 and follows writes and ftruncate() up to
 * its capacity, the device memory it holds.  Growing the capacity moves
 * the bytes to a larger allocation and puts it under the same descriptor
 * number, so a caller may fstat() the descriptor without a lock.  Bytes
 * move through the engine: file <-> backing transfers map the backing and
 * run as transfers to that mapping, host copies run as transfers whose
 * file is the backing itself.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine_i.h"

struct phx_backing {
	struct phx_device *dev;
	int fd;
	uint64_t capacity; /* charged to the device */
};

static int backing_size(struct phx_backing *bk, uint64_t *size)
{
	struct stat st;

	if (fstat(bk->fd, &st))
		return phx_err(errno, "%s: backing fd %d: fstat: %s",
			       bk->dev->name, bk->fd, strerror(errno));
	*size = (uint64_t)st.st_size;
	return 0;
}

/* Capacity and mapping state, as the backend knows them. */
static int backing_query(struct phx_backing *bk, uint64_t *capacity,
			 bool *mapped)
{
	const struct phx_backend_ops *ops = bk->dev->ops;

	*capacity = bk->capacity;
	*mapped = false;
	return ops->backing_query ?
		       ops->backing_query(bk->dev, bk->fd, capacity, mapped) :
		       0;
}

/* A new backing file of @capacity bytes (page multiple) in *@fd. */
static int backing_new(struct phx_device *dev, uint64_t capacity, int *fd)
{
	int ret = phx_device_charge(dev, capacity);

	if (ret)
		return ret;
	ret = dev->ops->backing_alloc(dev, capacity, fd);
	if (ret)
		phx_device_uncharge(dev, capacity);
	return ret;
}

PHX_EXPORT int phx_backing_alloc(struct phx_device *dev, uint64_t capacity,
				 struct phx_backing **out)
{
	struct phx_backing *bk;
	int ret;

	if (!dev->ops->backing_alloc)
		return phx_err(
			EOPNOTSUPP,
			"%s: %s devices have no backing files; use a buffer (phx_buf_alloc)",
			dev->name, phx_kind_name(dev->ops->kind));
	if (capacity > UINT64_MAX - PHX_PAGE)
		return phx_err(EFBIG, "%s: a backing file of %llu bytes",
			       dev->name, (unsigned long long)capacity);
	bk = calloc(1, sizeof(*bk));
	if (!bk)
		return phx_err(ENOMEM, "out of host memory for a backing file");
	bk->dev = dev;
	bk->capacity = phx_align_up(phx_max(capacity, 1), PHX_PAGE);
	ret = backing_new(dev, bk->capacity, &bk->fd);
	if (ret) {
		free(bk);
		return ret;
	}
	*out = bk;
	phx_err_clear();
	return 0;
}

PHX_EXPORT void phx_backing_free(struct phx_backing *bk)
{
	if (!bk)
		return;
	close(bk->fd);
	phx_device_uncharge(bk->dev, bk->capacity);
	free(bk);
}

PHX_EXPORT int phx_backing_fd(const struct phx_backing *bk)
{
	return bk->fd;
}

PHX_EXPORT int phx_backing_info(struct phx_backing *bk,
				struct phx_backing_info *out)
{
	bool mapped;
	int ret;

	memset(out, 0, sizeof(*out));
	ret = backing_size(bk, &out->size);
	if (!ret)
		ret = backing_query(bk, &out->capacity, &mapped);
	out->mapped = mapped;
	return ret;
}

/*
 * Run @io between its file and [@off, @off + io->len) of backing file @fd
 * (mapped for the length of the transfer).
 */
static int64_t backing_transfer(struct phx_device *dev, int fd, uint64_t off,
				struct phx_io *io)
{
	uint64_t start = phx_align_down(off, PHX_PAGE);
	uint64_t maplen = phx_align_up(off + io->len, PHX_PAGE) - start;
	char *map;

	if (!io->len) {
		io->dptr = 0;
		return phx_io_run(dev, io);
	}
	map = mmap(NULL, maplen, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		   (off_t)start);
	if (map == MAP_FAILED)
		return io->result =
			       phx_err(errno, "%s: mapping backing fd %d: %s",
				       dev->name, fd, strerror(errno));
	io->dptr = (phx_dptr_t)(uintptr_t)(map + (off - start));
	phx_io_run(dev, io);
	munmap(map, maplen);
	return io->result;
}

/* 0 where the file's capacity reaches @end, else -EFBIG. */
static int backing_holds(struct phx_backing *bk, uint64_t end)
{
	uint64_t capacity;
	bool mapped;
	int ret = backing_query(bk, &capacity, &mapped);

	if (!ret && end > capacity)
		ret = phx_err(
			EFBIG,
			"%s: backing fd %d holds %llu bytes, not %llu; phx_backing_reserve() it first",
			bk->dev->name, bk->fd, (unsigned long long)capacity,
			(unsigned long long)end);
	return ret;
}

/* Make the file at least @end bytes long, within its capacity. */
static int backing_extend(struct phx_backing *bk, uint64_t end)
{
	uint64_t size;
	int ret;

	ret = backing_size(bk, &size);
	if (ret || size >= end)
		return ret;
	ret = backing_holds(bk, end);
	if (ret)
		return ret;
	if (ftruncate(bk->fd, (off_t)end))
		return phx_err(errno, "%s: backing fd %d: ftruncate: %s",
			       bk->dev->name, bk->fd, strerror(errno));
	return 0;
}

/*
 * What the engine would refuse of read @io, refused before the backing
 * grows for it; *@size: the backing's size now.
 */
static int backing_read_check(struct phx_backing *bk, const struct phx_io *io,
			      uint64_t *size)
{
	int ret = phx_file_range_check(io->file_off, io->len);

	if (!ret && (ret = phx_fd_check(io->fd, PHX_OP_READ)) > 0)
		ret = 0;
	return ret ? ret : backing_size(bk, size);
}

PHX_EXPORT int64_t phx_backing_io(struct phx_backing *bk, struct phx_io *io)
{
	uint64_t size = 0;
	int ret;

	if (io->buf)
		return io->result = phx_err(
			       EINVAL,
			       "phx_backing_io: the transfer names a buffer; its target is the backing file at buf_off");
	if (io->len > UINT64_MAX - io->buf_off)
		return io->result = phx_err(
			       ERANGE, "backing range %llu+%llu is invalid",
			       (unsigned long long)io->buf_off,
			       (unsigned long long)io->len);
	if (io->op == PHX_OP_READ) {
		ret = backing_read_check(bk, io, &size);
		if (!ret)
			ret = backing_extend(bk, io->buf_off + io->len);
	} else {
		ret = backing_size(bk, &size);
		if (!ret && io->buf_off + io->len > size)
			ret = phx_err(
				ERANGE,
				"%s: backing fd %d is %llu bytes: cannot write %llu+%llu of it to a file",
				bk->dev->name, bk->fd, (unsigned long long)size,
				(unsigned long long)io->buf_off,
				(unsigned long long)io->len);
	}
	if (ret)
		return io->result = ret;
	backing_transfer(bk->dev, bk->fd, io->buf_off, io);
	if (io->op == PHX_OP_READ && io->result < (int64_t)io->len) {
		/* failed or short: the file grows only by what came */
		uint64_t end = io->buf_off +
			       (io->result > 0 ? (uint64_t)io->result : 0);

		if (ftruncate(bk->fd, (off_t)phx_max(size, end)))
			phx_err(errno, "%s: backing fd %d: ftruncate: %s",
				bk->dev->name, bk->fd, strerror(errno));
	}
	return io->result;
}

/* Move @len bytes between the file at @off and host memory @host. */
static int64_t backing_host_io(struct phx_backing *bk, enum phx_op op,
			       uint64_t off, const void *host, uint64_t len)
{
	struct phx_io io = {
		.op = op,
		.fd = bk->fd,
		.file_off = (int64_t)off,
		.dptr = (phx_dptr_t)(uintptr_t)host,
		.len = len,
	};

	/* Host memory is an address the engine can move to on these devices */
	return phx_io_run(bk->dev, &io);
}

PHX_EXPORT int64_t phx_backing_read(struct phx_backing *bk, uint64_t off,
				    void *dst, uint64_t len)
{
	if (!len)
		return 0;
	if (off > INT64_MAX)
		return phx_err(ERANGE, "%s: backing offset %llu is invalid",
			       bk->dev->name, (unsigned long long)off);
	return backing_host_io(bk, PHX_OP_READ, off, dst, len);
}

PHX_EXPORT int phx_backing_write(struct phx_backing *bk, uint64_t off,
				 const void *src, uint64_t len)
{
	int64_t done;
	int ret;

	if (!len)
		return 0;
	if (off > INT64_MAX || len > UINT64_MAX - off)
		return phx_err(ERANGE, "%s: backing range %llu+%llu is invalid",
			       bk->dev->name, (unsigned long long)off,
			       (unsigned long long)len);
	ret = backing_holds(bk, off + len);
	if (ret)
		return ret;
	done = backing_host_io(bk, PHX_OP_WRITE, off, src, len);
	if (done < 0)
		return (int)done;
	return done == (int64_t)len ?
		       0 :
		       phx_err(EIO, "%s: backing fd %d took %lld of %llu bytes",
			       bk->dev->name, bk->fd, (long long)done,
			       (unsigned long long)len);
}

PHX_EXPORT int phx_backing_reserve(struct phx_backing *bk, uint64_t capacity)
{
	struct phx_device *dev = bk->dev;
	uint64_t have, size;
	bool mapped;
	int fd, ret;

	ret = backing_query(bk, &have, &mapped);
	if (ret || capacity <= have)
		return ret;
	if (mapped)
		return phx_err(
			EBUSY,
			"%s: backing fd %d is mapped: its memory cannot move to a larger allocation; unmap it first",
			dev->name, bk->fd);
	if (capacity > UINT64_MAX - PHX_PAGE)
		return phx_err(EFBIG, "%s: a backing file of %llu bytes",
			       dev->name, (unsigned long long)capacity);
	ret = backing_size(bk, &size);
	if (ret)
		return ret;
	capacity = phx_align_up(capacity, PHX_PAGE);
	ret = backing_new(dev, capacity, &fd);
	if (ret)
		return ret;
	if (ftruncate(fd, (off_t)size)) {
		ret = phx_err(errno, "%s: backing file: ftruncate: %s",
			      dev->name, strerror(errno));
	} else if (size) {
		struct phx_io io = {
			.op = PHX_OP_WRITE,
			.fd = fd,
			.len = size,
		};

		if (backing_transfer(dev, bk->fd, 0, &io) >= 0 &&
		    io.result != (int64_t)size)
			ret = phx_err(
				EIO,
				"%s: moving a backing file: %lld of %llu bytes",
				dev->name, (long long)io.result,
				(unsigned long long)size);
		else if (io.result < 0)
			ret = (int)io.result;
	}
	/* The same descriptor number: callers may fstat it unlocked. */
	if (!ret && dup3(fd, bk->fd, O_CLOEXEC) < 0)
		ret = phx_err(errno, "%s: backing file: dup3: %s", dev->name,
			      strerror(errno));
	close(fd);
	if (ret) {
		phx_device_uncharge(dev, capacity);
		return ret;
	}
	phx_device_uncharge(dev, bk->capacity);
	bk->capacity = capacity;
	return 0;
}

PHX_EXPORT int phx_backing_trim(struct phx_backing *bk)
{
	struct phx_device *dev = bk->dev;
	uint64_t size, capacity;
	bool mapped;
	int ret;

	if (dev->ops->backing_trim) {
		ret = dev->ops->backing_trim(dev, bk->fd);
		if (!ret)
			ret = backing_query(bk, &capacity, &mapped);
	} else {
		/* The file holds what it stores: only the count changes. */
		ret = backing_size(bk, &size);
		capacity = phx_align_up(phx_max(size, 1), PHX_PAGE);
	}
	if (ret)
		return ret;
	if (capacity < bk->capacity) {
		phx_device_uncharge(dev, bk->capacity - capacity);
		bk->capacity = capacity;
	}
	return 0;
}
