// SPDX-License-Identifier: GPL-2.0
/*
 * phx_range_io.c - the bytes of a range file: read(2) and write(2)
 * through the kernel's direct map of its pages, and a GROW file's size.
 *
 * phx_range.c owns the ranges, their files and their mappings; these are
 * the copies its file operations call, and the clearing that keeps every
 * byte past a GROW file's size zero.
 */
#include <linux/fs.h>
#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/sched/signal.h>
#include <linux/uaccess.h>
#include <linux/uio.h>

#include "phx.h"

/**
 * phx_range_clear() - clear [@from, @to) of @range's memory.
 * @range: the range.
 * @from: first byte.
 * @to: end, exclusive.
 *
 * Context: @range->phx->lock held.
 */
void phx_range_clear(struct phx_range *range, u64 from, u64 to)
{
	lockdep_assert_held(&range->phx->lock);
	while (from < to) {
		size_t off = offset_in_page(from);
		size_t len = min_t(u64, PAGE_SIZE - off, to - from);

		zero_user(range->pages[from >> PAGE_SHIFT], off, len);
		from += len;
		cond_resched();
	}
}

/**
 * phx_range_set_size() - move a GROW file's size from @old to @size.
 * @range: the range.
 * @old: the size now.
 * @size: the new size.
 *
 * Only the page that held the old end can have bytes past it: growing
 * clears them, shrinking unmaps and clears what is cut off.
 *
 * Context: the inode lock held, and @range->phx->lock for write (so no
 * fault maps past a new, smaller end).
 */
void phx_range_set_size(struct phx_range *range, u64 old, u64 size)
{
	struct inode *inode = range->inode;

	lockdep_assert_held_write(&range->phx->lock);
	if (size < old) {
		i_size_write(inode, size);
		unmap_mapping_range(inode->i_mapping, PAGE_ALIGN(size), 0, 1);
		phx_range_clear(range, size, PAGE_ALIGN(old));
	} else if (size > old) {
		phx_range_clear(range, old, min_t(u64, PAGE_ALIGN(old), size));
		i_size_write(inode, size);
	}
}

/*
 * read_iter and write_iter copy with phx->lock held for read, but never
 * fault a user page in while they hold it: the buffer may be a mapping of
 * a range of the same device, whose fault takes the lock again and would
 * queue behind a writer (a truncate, an unbind) that waits for this
 * reader; or a mapping of a slow file, which would hold the lock as long
 * as its fault takes.  A page that does not copy whole with page faults
 * off is faulted in with the lock dropped, then copied again.
 */
ssize_t phx_range_read_iter(struct kiocb *iocb, struct iov_iter *to)
{
	struct phx_range *range = phx_file_range(iocb->ki_filp);
	struct phx_dev *phx = range->phx;
	loff_t pos = iocb->ki_pos;
	ssize_t done = 0, ret = 0;

	if (pos < 0)
		return -EINVAL;
	if (!iov_iter_count(to))
		return 0;

	down_read(&phx->lock);
	while (iov_iter_count(to)) {
		size_t off = offset_in_page(pos);
		size_t len, copied;
		u64 size;

		/* Checked again after every time the lock was dropped. */
		if (phx->dead || range->revoked) {
			ret = -ENODEV;
			break;
		}
		size = phx_range_end(range);
		if (pos >= size)
			break;
		len = min_t(u64, PAGE_SIZE - off, size - pos);
		len = min(len, iov_iter_count(to));
		pagefault_disable();
		copied = copy_page_to_iter(range->pages[pos >> PAGE_SHIFT], off,
					   len, to);
		pagefault_enable();
		done += copied;
		pos += copied;
		if (copied < len) {
			up_read(&phx->lock);
			if (fault_in_iov_iter_writeable(to, len - copied) ==
			    len - copied) {
				ret = -EFAULT;
				goto out;
			}
			down_read(&phx->lock);
			continue;
		}
		if (fatal_signal_pending(current))
			break;
		cond_resched();
	}
	up_read(&phx->lock);
out:
	iocb->ki_pos = pos;
	return done ? done : ret;
}

/*
 * Copy from @from to @range at *@ppos, up to @end.  phx->lock is held for
 * read on entry and on return, and dropped meanwhile to fault the user's
 * buffer in.
 */
static ssize_t phx_range_copy_in(struct phx_range *range, struct iov_iter *from,
				 loff_t *ppos, u64 end)
{
	struct phx_dev *phx = range->phx;
	loff_t pos = *ppos;
	ssize_t done = 0, ret = 0;

	lockdep_assert_held_read(&phx->lock);
	while (iov_iter_count(from) && pos < end) {
		size_t off = offset_in_page(pos);
		size_t len = min_t(u64, PAGE_SIZE - off, end - pos);
		size_t copied, left;

		len = min(len, iov_iter_count(from));
		pagefault_disable();
		copied = copy_page_from_iter(range->pages[pos >> PAGE_SHIFT],
					     off, len, from);
		pagefault_enable();
		done += copied;
		pos += copied;
		if (copied < len) {
			up_read(&phx->lock);
			left = fault_in_iov_iter_readable(from, len - copied);
			down_read(&phx->lock);
			if (left == len - copied) {
				ret = -EFAULT;
				break;
			}
			if (phx->dead || range->revoked) {
				ret = -ENODEV;
				break;
			}
			continue;
		}
		if (fatal_signal_pending(current))
			break;
		cond_resched();
	}
	*ppos = pos;
	return done ? done : ret;
}

/* A GROW file: writes extend the size up to the capacity. */
static ssize_t phx_range_write_grow(struct kiocb *iocb, struct iov_iter *from)
{
	struct phx_range *range = phx_file_range(iocb->ki_filp);
	struct inode *inode = range->inode;
	loff_t pos;
	ssize_t ret;
	u64 size;

	inode_lock(inode);
	down_read(&range->phx->lock);
	if (range->phx->dead || range->revoked) {
		ret = -ENODEV;
		goto out;
	}
	size = i_size_read(inode);
	pos = iocb->ki_flags & IOCB_APPEND ? size : iocb->ki_pos;
	if (pos < 0) {
		ret = -EINVAL;
		goto out;
	}
	/* Like a file system that is out of room for this file only. */
	if (pos >= phx_range_size(range)) {
		ret = -EFBIG;
		goto out;
	}
	if (pos > size)
		phx_range_clear(range, size, min_t(u64, PAGE_ALIGN(size), pos));
	ret = phx_range_copy_in(range, from, &pos, phx_range_size(range));
	if (ret > 0) {
		if (pos > i_size_read(inode))
			i_size_write(inode, pos);
		iocb->ki_pos = pos;
		inode_set_mtime_to_ts(inode, inode_set_ctime_current(inode));
	}
out:
	up_read(&range->phx->lock);
	inode_unlock(inode);
	return ret;
}

ssize_t phx_range_write_iter(struct kiocb *iocb, struct iov_iter *from)
{
	struct phx_range *range = phx_file_range(iocb->ki_filp);
	u64 size = phx_range_size(range);
	loff_t pos = iocb->ki_pos;
	ssize_t ret;

	if (!iov_iter_count(from))
		return 0;
	if (range->grow)
		return phx_range_write_grow(iocb, from);
	if (iocb->ki_flags & IOCB_APPEND)
		pos = size;
	if (pos < 0)
		return -EINVAL;
	/* The size of device memory is fixed: like a block device. */
	if (pos >= size)
		return -ENOSPC;

	down_read(&range->phx->lock);
	if (range->phx->dead || range->revoked) {
		up_read(&range->phx->lock);
		return -ENODEV;
	}
	ret = phx_range_copy_in(range, from, &pos, size);
	up_read(&range->phx->lock);
	if (ret > 0)
		iocb->ki_pos = pos;
	return ret;
}
