/* SPDX-License-Identifier: MIT */
/* attr.c - phxfs's getattr and setattr: mode, owner, times and size. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include "phxfs.h"

static void phxfs_getattr(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct phxfs *fs = phxfs_fs(req);
	struct phxfs_inode *inode;
	struct stat st;

	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, ino);
	if (inode)
		phxfs_fill_stat(fs, inode, &st);
	pthread_mutex_unlock(&fs->lock);
	if (!inode)
		fuse_reply_err(req, ENOENT);
	else
		fuse_reply_attr(req, &st, PHXFS_ATTR_TIMEOUT);
}

static void set_time(struct timespec *dst, const struct timespec *src, bool now)
{
	if (now)
		phxfs_touch(dst);
	else
		*dst = *src;
}

static void phxfs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
			  int to_set, struct fuse_file_info *fi)
{
	struct phxfs *fs = phxfs_fs(req);
	struct phxfs_inode *inode;
	struct stat st;
	int err = 0;

	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, ino);
	pthread_mutex_unlock(&fs->lock);
	if (!inode) {
		err = -ENOENT;
		goto out_err;
	}
	if (to_set & FUSE_SET_ATTR_SIZE) {
		if (!S_ISREG(inode->mode)) {
			err = S_ISDIR(inode->mode) ? -EISDIR : -EINVAL;
			goto out_err;
		}
		if (attr->st_size < 0 ||
		    (uint64_t)attr->st_size > PHXFS_MAX_FILE) {
			err = -EFBIG;
			goto out_err;
		}
		pthread_rwlock_wrlock(&inode->io_lock);
		err = phxfs_data_resize(inode, (uint64_t)attr->st_size);
		pthread_rwlock_unlock(&inode->io_lock);
		if (err)
			goto out_err;
	}
	pthread_mutex_lock(&fs->lock);
	if ((to_set & FUSE_SET_ATTR_SIZE) && !(to_set & FUSE_SET_ATTR_MODE))
		phxfs_kill_priv(req, inode);
	if (to_set & FUSE_SET_ATTR_MODE)
		inode->mode = (inode->mode & S_IFMT) | (attr->st_mode & 07777);
	if (to_set & FUSE_SET_ATTR_UID)
		inode->uid = attr->st_uid;
	if (to_set & FUSE_SET_ATTR_GID)
		inode->gid = attr->st_gid;
	if (to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW))
		set_time(&inode->atime, &attr->st_atim,
			 to_set & FUSE_SET_ATTR_ATIME_NOW);
	if (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW))
		set_time(&inode->mtime, &attr->st_mtim,
			 to_set & FUSE_SET_ATTR_MTIME_NOW);
	else if (to_set & FUSE_SET_ATTR_SIZE)
		phxfs_touch(&inode->mtime);
	phxfs_touch(&inode->ctime);
	phxfs_fill_stat(fs, inode, &st);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_attr(req, &st, PHXFS_ATTR_TIMEOUT);
	return;

out_err:
	fuse_reply_err(req, -err);
}

/*
 * Create an entry named @name in @parent; a regular file is also opened
 * (nopen) when @open is set.  Replies to @req unless @fi is set.
 */

void phxfs_attr_ops(struct fuse_lowlevel_ops *o)
{
	o->getattr = phxfs_getattr;
	o->setattr = phxfs_setattr;
}
