/* SPDX-License-Identifier: MIT */
/* xattr.c - phxfs's extended attributes. */
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

/*
 * The value of xattr @name of @inode into @out; fs->lock held.
 * @uid is the caller's: the handle is for the owner (and root) only.
 */
static int xattr_value(struct phxfs *fs, struct phxfs_inode *inode,
		       const char *name, uid_t uid, char *out, size_t len)
{
	bool file = S_ISREG(inode->mode);

	if (!strcmp(name, "user.phx.device") && inode->dev)
		return snprintf(out, len, "%s", inode->dev->name);
	if (!strcmp(name, "user.phx.path") && file)
		return snprintf(out, len, "%s",
				phxfs_path_name(atomic_load(&inode->path)));
	/* FUSE requests the daemon served on the device, not the kernel. */
	if (!strcmp(name, "user.phx.requests") && inode->dev)
		return snprintf(out, len, "write %llu read %llu",
				(unsigned long long)atomic_load(
					&inode->dev->fuse_writes),
				(unsigned long long)atomic_load(
					&inode->dev->fuse_reads));
	if (!strcmp(name, "user.phx.handle") && file) {
		if (uid && uid != inode->uid)
			return -EACCES;
		return snprintf(out, len, "%s %llu", fs->sock_path,
				(unsigned long long)inode->ino);
	}
	/* Any inode answers, so a tool finds the daemon from any path;
	 * only the root lists it. */
	if (!strcmp(name, "user.phx.socket"))
		return snprintf(out, len, "%s", fs->sock_path);
	return -ENODATA;
}

static void reply_xattr(fuse_req_t req, const char *val, int len, size_t size)
{
	if (len < 0)
		fuse_reply_err(req, -len);
	else if (!size)
		fuse_reply_xattr(req, (size_t)len);
	else if ((size_t)len > size)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, val, (size_t)len);
}

static void phxfs_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			   size_t size)
{
	struct phxfs *fs = phxfs_fs(req);
	struct phxfs_inode *inode;
	char val[256];
	int len = -ENOENT;

	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, ino);
	if (inode)
		len = xattr_value(fs, inode, name, fuse_req_ctx(req)->uid, val,
				  sizeof(val));
	pthread_mutex_unlock(&fs->lock);
	reply_xattr(req, val, len, size);
}

static void phxfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	static const char *const names[] = { "user.phx.device", "user.phx.path",
					     "user.phx.handle",
					     "user.phx.requests",
					     "user.phx.socket" };
	struct phxfs *fs = phxfs_fs(req);
	struct phxfs_inode *inode;
	char list[256], val[256];
	int len = 0;
	unsigned int i;

	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, ino);
	for (i = 0; inode && i < sizeof(names) / sizeof(names[0]); i++) {
		if (xattr_value(fs, inode, names[i], fuse_req_ctx(req)->uid,
				val, sizeof(val)) < 0)
			continue;
		if (!strcmp(names[i], "user.phx.socket") && inode != fs->root)
			continue;
		len += snprintf(list + len, sizeof(list) - (size_t)len, "%s",
				names[i]) +
		       1;
	}
	pthread_mutex_unlock(&fs->lock);
	reply_xattr(req, list, inode ? len : -ENOENT, size);
}

static void phxfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			   const char *value, size_t size, int flags)
{
	fuse_reply_err(req, strncmp(name, "user.phx.", 9) ? ENOTSUP : EPERM);
}

static void phxfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	fuse_reply_err(req, strncmp(name, "user.phx.", 9) ? ENOTSUP : EPERM);
}

void phxfs_xattr_ops(struct fuse_lowlevel_ops *o)
{
	o->setxattr = phxfs_setxattr;
	o->getxattr = phxfs_getxattr;
	o->listxattr = phxfs_listxattr;
	o->removexattr = phxfs_removexattr;
}
