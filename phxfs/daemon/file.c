/* SPDX-License-Identifier: MIT */
/* file.c - phxfs's file data: open, read, write, allocate, release. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "phxfs.h"

static pthread_key_t tbuf_key;
static pthread_once_t tbuf_once = PTHREAD_ONCE_INIT;

struct tbuf {
	size_t len;
	char data[];
};

static void tbuf_key_init(void)
{
	pthread_key_create(&tbuf_key, free);
}

static void *thread_buf(size_t len)
{
	struct tbuf *b;

	pthread_once(&tbuf_once, tbuf_key_init);
	b = pthread_getspecific(tbuf_key);
	if (b && b->len >= len)
		return b->data;
	free(b);
	b = malloc(offsetof(struct tbuf, data) + len);
	pthread_setspecific(tbuf_key, b);
	if (!b)
		return NULL;
	b->len = len;
	return b->data;
}

/*
 * Reads out of device memory land in pinned host memory from libphoenix's
 * pool (phx_host_alloc()): a device-to-host copy into pinned memory runs
 * at the bus's speed, while the driver stages one into pageable memory at
 * a fraction of it.  Every request takes a buffer of the largest request
 * (max_write), so the pool hands the same few around; when they are all
 * in use the thread's pageable buffer serves.
 */
static size_t rbuf_len; /* set in phxfs_file_ops(), before any request */

static void *rbuf_get(struct phxfs_dev *d, size_t len)
{
	void *p;

	if (len > rbuf_len || phx_host_alloc(d->dev, rbuf_len, &p))
		return NULL;
	return p;
}

static void open_flags(struct phxfs *fs, struct fuse_file_info *fi)
{
	fi->direct_io = !fs->opts.writeback;
#if FUSE_VERSION >= FUSE_MAKE_VERSION(3, 15)
	fi->parallel_direct_writes = !fs->opts.writeback;
#endif
}

/* An open of @inode, in fi->fh until release. */
static struct phxfs_handle *handle_new(struct phxfs_inode *inode,
				       struct fuse_file_info *fi)
{
	struct phxfs_handle *h = malloc(sizeof(*h));

	if (!h)
		return NULL;
	h->inode = inode;
	h->uid = 0;
	h->passthrough = false;
	phxfs_ra_init(h, false);
	fi->fh = (uintptr_t)h;
	return h;
}

/*
 * Set up @fi for regular file @inode, which holds an open reference:
 * truncate it for O_TRUNC, and on a passthrough device give the kernel
 * its range file, with room to grow when it is opened for writing.
 * Files the daemon serves itself in direct I/O are read ahead.
 */
int phxfs_open_file(struct phxfs *fs, fuse_req_t req, struct phxfs_inode *inode,
		    struct fuse_file_info *fi)
{
	struct phxfs_handle *h = handle_new(inode, fi);
	bool ranged = false;
	int err = 0;

	if (!h)
		return -ENOMEM;
	h->uid = fuse_req_ctx(req)->uid;
	pthread_rwlock_wrlock(&inode->io_lock);
	if (fi->flags & O_TRUNC)
		err = phxfs_data_resize(inode, 0); /* atomic_o_trunc */
	ranged = phxfs_dev_ranged(inode->dev);
	if (!err && ranged) {
		uint64_t size = phxfs_data_size(inode);
		bool writing = (fi->flags & O_ACCMODE) != O_RDONLY;

		err = phxfs_range_reserve(inode, size,
					  writing ? size + fs->headroom : size);
		if (!err)
			h->passthrough =
				phxfs_passthrough_open(fs, req, inode, fi);
	}
	pthread_rwlock_unlock(&inode->io_lock);
	if (err) {
		free(h);
		return err;
	}
	if (fi->flags & O_TRUNC) {
		bool killed;

		pthread_mutex_lock(&fs->lock);
		phxfs_touch(&inode->mtime);
		inode->ctime = inode->mtime;
		killed = phxfs_kill_priv(req, inode);
		pthread_mutex_unlock(&fs->lock);
		if (killed)
			phxfs_attr_changed(fs, inode);
	}
	if (!h->passthrough)
		open_flags(fs, fi);
	phxfs_ra_init(h, !ranged && !fs->opts.writeback);
	return 0;
}

static void phxfs_open(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct phxfs *fs = phxfs_fs(req);
	struct phxfs_inode *inode;
	int err = 0;

	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, ino);
	if (!inode)
		err = -ENOENT;
	else if (S_ISDIR(inode->mode))
		err = -EISDIR;
	else
		inode->nopen++;
	pthread_mutex_unlock(&fs->lock);
	if (err)
		goto out;
	if (S_ISREG(inode->mode))
		err = phxfs_open_file(fs, req, inode, fi);
	else if (handle_new(inode, fi))
		open_flags(fs, fi);
	else
		err = -ENOMEM;
	if (err) {
		pthread_mutex_lock(&fs->lock);
		phxfs_inode_unref(fs, inode, 0, 1);
		pthread_mutex_unlock(&fs->lock);
	}
out:
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_open(req, fi);
}

static void phxfs_release(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct phxfs *fs = phxfs_fs(req);
	struct phxfs_handle *h = phxfs_handle(fi);
	struct phxfs_inode *inode = h->inode;

	phxfs_ra_release(h);
	if (S_ISREG(inode->mode) && phxfs_dev_ranged(inode->dev)) {
		pthread_rwlock_wrlock(&inode->io_lock);
		if (h->passthrough)
			phxfs_passthrough_release(fs, req, inode);
		else
			phxfs_range_trim(inode);
		pthread_rwlock_unlock(&inode->io_lock);
	}
	free(h);
	pthread_mutex_lock(&fs->lock);
	phxfs_inode_unref(fs, inode, 0, 1);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_err(req, 0);
}

/* Read [@off, @off + @len) of a backing file, which holds it, into @host. */
static int backing_read(struct phxfs_inode *inode, void *host, uint64_t len,
			uint64_t off)
{
	int64_t n = phx_backing_read(inode->backing, off, host, len);

	return n < 0 ? (int)n : (uint64_t)n == len ? 0 : -EIO;
}

/* Answer a read with @n bytes at @host. */
static void reply_data(fuse_req_t req, struct phxfs_dev *dev, const void *host,
		       uint64_t n)
{
	atomic_fetch_add(&dev->fuse_reads, 1);
	atomic_fetch_add(&dev->fuse_out, n);
	/* the reply copies the data into the kernel before returning */
	fuse_reply_buf(req, host, n);
}

static void phxfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	struct phxfs_handle *h = phxfs_handle(fi);
	struct phxfs_inode *inode = h->inode;
	struct phxfs_ra_hit hit;
	struct phxfs_dev *dev;
	uint64_t fsize, n = 0;
	void *host = NULL, *pooled = NULL, *payload;
	size_t psize = 0;
	int err = 0;

	/*
	 * Over io_uring the reply is built in the request's payload: the
	 * data is copied from device memory straight into it.  A read-ahead
	 * would only add a copy from its buffer into the payload (libfuse's
	 * reply copies there), so these reads have none.
	 */
	payload = phxfs_req_payload(req, &psize);
	if (payload && psize < size)
		payload = NULL;
	if (!payload && off >= 0 &&
	    phxfs_ra_take(h, (uint64_t)off, size, &hit)) {
		/* the next range is copied while this one is answered */
		phxfs_ra_advance(h, hit.dev, (uint64_t)off, hit.len, size);
		reply_data(req, hit.dev, hit.host, hit.len);
		phxfs_ra_put(&hit);
		return;
	}
	pthread_rwlock_rdlock(&inode->io_lock);
	/*
	 * The pooled buffer goes back to this device after the reply, when
	 * the inode may be gone (released and forgotten) or moved: devices
	 * live as long as the daemon.
	 */
	dev = inode->dev;
	fsize = phxfs_data_size(inode);
	if (off >= 0 && (uint64_t)off < fsize)
		n = fsize - (uint64_t)off < size ? fsize - (uint64_t)off : size;
	if (n) {
		host = payload;
		if (!host)
			host = pooled = rbuf_get(dev, n);
		if (!host)
			host = thread_buf(size);
		if (!host)
			err = -ENOMEM;
		else if (phxfs_ranged(inode))
			err = backing_read(inode, host, n, (uint64_t)off);
		else
			err = phx_memcpy_from_buf(host, inode->buf,
						  (uint64_t)off, n);
	}
	pthread_rwlock_unlock(&inode->io_lock);
	if (err) {
		atomic_fetch_add(&dev->fuse_reads, 1);
		fuse_reply_err(req, -err);
	} else {
		if (off >= 0 && !payload)
			phxfs_ra_advance(h, dev, (uint64_t)off, n, size);
		reply_data(req, dev, host, n);
	}
	if (pooled)
		phx_host_free(dev->dev, pooled, rbuf_len);
}

/*
 * Store @size bytes at @off for @uid, growing the file; io_lock not held.
 */
static int write_data(struct phxfs_inode *inode, uid_t uid, const char *data,
		      uint64_t size, uint64_t off)
{
	uint64_t end = off + size, old;
	int ret;

	if (phxfs_dev_ranged(inode->dev)) {
		/* Only opens the kernel could not pass through come here. */
		pthread_rwlock_wrlock(&inode->io_lock);
		ret = phxfs_range_reserve(inode, end, end);
		if (!ret)
			ret = phx_backing_write(inode->backing, off, data,
						size);
		pthread_rwlock_unlock(&inode->io_lock);
		return ret;
	}
	pthread_rwlock_rdlock(&inode->io_lock);
	if (end <= atomic_load(&inode->size)) {
		ret = phxfs_room_for(inode, uid, off, size);
		if (!ret)
			ret = phx_memcpy_to_buf(inode->buf, off, data, size);
		pthread_rwlock_unlock(&inode->io_lock);
		return ret;
	}
	pthread_rwlock_unlock(&inode->io_lock);

	/* Growing: alone on the buffer, and undone if the device is full. */
	pthread_rwlock_wrlock(&inode->io_lock);
	old = atomic_load(&inode->size);
	ret = phxfs_room_for(inode, uid, off, size);
	if (!ret && end > old)
		ret = phxfs_data_resize(inode, end);
	if (!ret)
		ret = phx_memcpy_to_buf(inode->buf, off, data, size);
	if (!ret && end > old && phxfs_in_reserve(inode, uid))
		ret = -ENOSPC;
	if (ret && end > old)
		phxfs_data_resize(inode, old);
	pthread_rwlock_unlock(&inode->io_lock);
	return ret;
}

static void phxfs_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
			size_t size, off_t off, struct fuse_file_info *fi)
{
	struct phxfs *fs = phxfs_fs(req);
	struct phxfs_inode *inode = phxfs_file(fi);
	bool killed = false;
	int err = 0;

	atomic_fetch_add(&inode->dev->fuse_writes, 1);
	/* @buf is the payload over io_uring: pinned, it needs no staging */
	phxfs_req_payload(req, NULL);
	/*
	 * As Linux does at a file system's size limit: a write that starts
	 * at or past it fails, one that crosses it stores what fits and
	 * says so in its count (POSIX's "as many bytes as there is room
	 * for").
	 */
	if (off < 0 || (size && (uint64_t)off >= PHXFS_MAX_FILE)) {
		err = off < 0 ? -EINVAL : -EFBIG;
		goto out_err;
	}
	if (size > PHXFS_MAX_FILE - (uint64_t)off)
		size = PHXFS_MAX_FILE - (uint64_t)off;
	if (size) {
		/* a page-cache flush runs as nobody in particular: it is
		 * the opener's write */
		uid_t uid = fi->writepage ? phxfs_handle(fi)->uid :
					    fuse_req_ctx(req)->uid;

		err = write_data(inode, uid, buf, size, (uint64_t)off);
		/* a failed write may have stored part of it */
		phxfs_data_changed(inode);
		if (err)
			goto out_err;
	}
	atomic_store(&inode->path, PHX_PATH_MEMCPY);
	atomic_fetch_add(&inode->dev->fuse_in, size);
	pthread_mutex_lock(&fs->lock);
	phxfs_touch(&inode->mtime);
	inode->ctime = inode->mtime;
	/*
	 * Page-cache writeback carries the flusher's credentials, not the
	 * writer's: with -o writeback the kernel drops the bits itself.
	 */
	if (!fi->writepage)
		killed = phxfs_kill_priv(req, inode);
	pthread_mutex_unlock(&fs->lock);
	if (killed)
		phxfs_attr_changed(fs, inode);
	fuse_reply_write(req, size);
	return;

out_err:
	fuse_reply_err(req, -err);
}

static void phxfs_flush(fuse_req_t req, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0);
}

static void phxfs_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
			struct fuse_file_info *fi)
{
	/* Every write has reached device memory before it was answered. */
	fuse_reply_err(req, 0);
}

static void phxfs_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off,
			    off_t len, struct fuse_file_info *fi)
{
	struct phxfs *fs = phxfs_fs(req);
	struct phxfs_inode *inode = phxfs_file(fi);
	uint64_t end = (uint64_t)off + (uint64_t)len, old;
	int err = 0;

	if (mode) {
		err = -EOPNOTSUPP;
		goto out;
	}
	if (off < 0 || len <= 0 || end > PHXFS_MAX_FILE) {
		err = off < 0 || len <= 0 ? -EINVAL : -EFBIG;
		goto out;
	}
	pthread_rwlock_wrlock(&inode->io_lock);
	old = phxfs_data_size(inode);
	err = phxfs_room_for(inode, fuse_req_ctx(req)->uid, (uint64_t)off,
			     (uint64_t)len);
	if (!err && end > old)
		err = phxfs_data_resize(inode, end);
	/* A range file's memory is all there already. */
	if (!err && !phxfs_ranged(inode))
		err = phx_buf_commit(inode->buf, (uint64_t)off, (uint64_t)len);
	if (!err && end > old &&
	    phxfs_in_reserve(inode, fuse_req_ctx(req)->uid))
		err = -ENOSPC;
	if (err && end > old)
		phxfs_data_resize(inode, old);
	pthread_rwlock_unlock(&inode->io_lock);
	if (!err) {
		/* a change of the file, as a write is, grown or not */
		pthread_mutex_lock(&fs->lock);
		phxfs_touch(&inode->mtime);
		inode->ctime = inode->mtime;
		pthread_mutex_unlock(&fs->lock);
	}
out:
	/* whatever a mode did to the file, read-aheads made before are off */
	phxfs_data_changed(inode);
	fuse_reply_err(req, -err);
}

/*
 * SEEK_DATA / SEEK_HOLE from the buffer's backed ranges: holes are what
 * holds no memory (they read as zeros), and the end of the file is one.
 */
static void phxfs_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
			struct fuse_file_info *fi)
{
	struct phxfs_inode *inode = phxfs_file(fi);
	uint64_t doff = 0, dlen = 0;
	int err;

	if (whence != SEEK_DATA && whence != SEEK_HOLE) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (off < 0) {
		fuse_reply_err(req, ENXIO);
		return;
	}
	pthread_rwlock_rdlock(&inode->io_lock);
	err = phxfs_data_next(inode, (uint64_t)off, &doff, &dlen);
	if (whence == SEEK_HOLE && err == -ENXIO &&
	    (uint64_t)off < phxfs_data_size(inode)) {
		err = 0; /* only hole from @off on */
		doff = (uint64_t)off;
	} else if (whence == SEEK_HOLE && !err) {
		doff = doff > (uint64_t)off ? (uint64_t)off : doff + dlen;
	}
	pthread_rwlock_unlock(&inode->io_lock);
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_lseek(req, (off_t)doff);
}

void phxfs_file_ops(struct phxfs *fs, struct fuse_lowlevel_ops *o)
{
	rbuf_len = fs->max_write;
	o->open = phxfs_open;
	o->read = phxfs_read;
	o->write = phxfs_write;
	o->flush = phxfs_flush;
	o->release = phxfs_release;
	o->fsync = phxfs_fsync;
	o->fallocate = phxfs_fallocate;
	o->lseek = phxfs_lseek;
}
