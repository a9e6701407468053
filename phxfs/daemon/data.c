/* SPDX-License-Identifier: MIT */
/*
 * data.c - a regular file's bytes: its device buffer (or phx.ko range,
 * backing.c) grown, shrunk, moved and freed, and the root reserve that
 * growth by other users must leave.  Called by the inode table and the
 * FUSE operations; calls only libphoenix and backing.c.
 */
#include <errno.h>
#include <pthread.h>

#include "phxfs.h"

/* May @uid take @len more bytes of @d?  0 or -ENOSPC (root reserve). */
static int dev_room(struct phxfs_dev *d, uid_t uid, uint64_t len)
{
	struct phx_device_info info;

	if (!uid || !len || !d->root_reserve || phxfs_dev_ranged(d) ||
	    phx_device_info(d->dev, &info))
		return 0;
	return info.used + len > d->limit - d->root_reserve ? -ENOSPC : 0;
}

/* Has @uid's growth on @d taken memory of its root reserve? */
static bool dev_in_reserve(struct phxfs_dev *d, uid_t uid)
{
	struct phx_device_info info;

	if (!uid || !d->root_reserve || phxfs_dev_ranged(d) ||
	    phx_device_info(d->dev, &info))
		return false;
	return info.used > d->limit - d->root_reserve;
}

int phxfs_room_for(struct phxfs_inode *inode, uid_t uid, uint64_t off,
		   uint64_t len)
{
	uint64_t doff, dlen;

	/* stored bytes are overwritten in place: they take nothing more */
	if (uid && len && inode->buf &&
	    !phx_buf_next_data(inode->buf, off, &doff, &dlen) && doff <= off &&
	    doff + dlen >= off + len)
		return 0;
	return dev_room(inode->dev, uid, len);
}

bool phxfs_in_reserve(struct phxfs_inode *inode, uid_t uid)
{
	return dev_in_reserve(inode->dev, uid);
}

int phxfs_data_resize(struct phxfs_inode *inode, uint64_t size)
{
	int ret;

	if (size > PHXFS_MAX_FILE)
		return -EFBIG;
	if (phxfs_dev_ranged(inode->dev))
		return phxfs_range_set_size(inode, size);
	if (!inode->buf) {
		if (!size)
			goto out;
		ret = phx_buf_alloc(inode->dev->dev, size, PHX_BUF_SPARSE,
				    &inode->buf);
		if (ret)
			return ret;
		atomic_fetch_add(&inode->dev->files, 1);
	} else {
		ret = phx_buf_resize(inode->buf, size);
		if (ret)
			return ret;
	}
out:
	atomic_store(&inode->size, size);
	phxfs_data_changed(inode);
	return 0;
}

int phxfs_data_ensure(struct phxfs_inode *inode)
{
	int ret;

	if (phxfs_dev_ranged(inode->dev))
		return phxfs_range_reserve(inode, 0, 0);
	if (inode->buf)
		return 0;
	ret = phx_buf_alloc(inode->dev->dev, 0, PHX_BUF_SPARSE, &inode->buf);
	if (!ret)
		atomic_fetch_add(&inode->dev->files, 1);
	return ret;
}

int phxfs_data_move(struct phxfs_inode *inode, struct phxfs_dev *to, uid_t uid)
{
	uint64_t size = atomic_load(&inode->size), off = 0, doff, dlen;
	struct phx_buf *nb;
	int ret;

	/* Range files are the kernel's too: mv copies them itself. */
	if (phxfs_ranged(inode) || phxfs_dev_ranged(to))
		return -EXDEV;
	if (!inode->buf) {
		inode->dev = to;
		phxfs_data_changed(inode);
		return 0;
	}
	/* a write of what the file holds, on @to */
	ret = dev_room(to, uid, phx_buf_committed(inode->buf));
	if (ret)
		return ret;
	ret = phx_buf_alloc(to->dev, size, PHX_BUF_SPARSE, &nb);
	if (ret)
		return ret;
	/* the data runs only: holes stay holes and take no memory there */
	while (!ret && off < size &&
	       !phx_buf_next_data(inode->buf, off, &doff, &dlen) &&
	       doff < size) {
		dlen = dlen < size - doff ? dlen : size - doff;
		ret = phx_memcpy_buf(nb, doff, inode->buf, doff, dlen);
		off = doff + dlen;
	}
	/* backing grows in chunks: past the reserve, undone */
	if (!ret && dev_in_reserve(to, uid))
		ret = -ENOSPC;
	if (ret) {
		phx_buf_free(nb);
		return ret;
	}
	phx_buf_free(inode->buf);
	atomic_fetch_sub(&inode->dev->files, 1);
	atomic_fetch_add(&to->files, 1);
	inode->buf = nb;
	inode->dev = to;
	phxfs_data_changed(inode);
	return 0;
}

void phxfs_data_free(struct phxfs_inode *inode)
{
	if (phxfs_ranged(inode)) {
		pthread_rwlock_wrlock(&inode->io_lock);
		phxfs_range_free(inode);
		pthread_rwlock_unlock(&inode->io_lock);
		return;
	}
	if (!inode->buf)
		return;
	pthread_rwlock_wrlock(&inode->io_lock);
	phx_buf_free(inode->buf);
	inode->buf = NULL;
	atomic_fetch_sub(&inode->dev->files, 1);
	phxfs_data_changed(inode);
	pthread_rwlock_unlock(&inode->io_lock);
}
