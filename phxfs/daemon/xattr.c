/* SPDX-License-Identifier: MIT */
/*
 * xattr.c - phxfs's extended attribute requests: the read-only user.phx.*
 * ones the file system answers itself, and user.*, security.* and
 * trusted.* ones stored with the inode (xattr_store.c).  system.* (POSIX
 * ACLs) is not supported: ENOTSUP, so the kernel checks the mode bits.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#include "phxfs.h"

#define PHX_PREFIX "user.phx."

static const char *const phx_names[] = {
	"user.phx.device",   "user.phx.path",	   "user.phx.handle",
	"user.phx.requests", "user.phx.readahead", "user.phx.socket"
};

/*
 * 0 for a name of the namespaces stored, else -ENOTSUP; a namespace with
 * nothing after it names no attribute: -EINVAL, as on tmpfs.
 */
static int stored_name(const char *name)
{
	static const char *const ns[] = { "user.", "security.", "trusted." };
	unsigned int i;

	for (i = 0; i < sizeof(ns) / sizeof(ns[0]); i++)
		if (!strncmp(name, ns[i], strlen(ns[i])))
			return name[strlen(ns[i])] ? 0 : -EINVAL;
	return -ENOTSUP;
}

/*
 * The value of user.phx.* attribute @name of @inode into @out; fs->lock
 * held.  @uid is the caller's: the handle is for the owner (and root).
 */
static int phx_value(struct phxfs *fs, struct phxfs_inode *inode,
		     const char *name, uid_t uid, char *out, size_t len)
{
	bool file = S_ISREG(inode->mode);

	if (!strcmp(name, "user.phx.device") && inode->dev)
		return snprintf(out, len, "%s", inode->dev->name);
	if (!strcmp(name, "user.phx.path") && file)
		return snprintf(out, len, "%s",
				phxfs_path_name(atomic_load(&inode->path)));
	/* FUSE requests the daemon served on the device, not the kernel. */
	if (!strcmp(name, "user.phx.requests") && inode->dev) {
		struct phxfs_dev *d = inode->dev;

		return snprintf(
			out, len,
			"write %llu read %llu readahead %llu dropped %llu",
			(unsigned long long)atomic_load(&d->fuse_writes),
			(unsigned long long)atomic_load(&d->fuse_reads),
			(unsigned long long)atomic_load(&d->ra_hits),
			(unsigned long long)atomic_load(&d->ra_dropped));
	}
	/* Reads of the file served from a read-ahead, read-aheads dropped. */
	if (!strcmp(name, "user.phx.readahead") && file)
		return snprintf(
			out, len, "served %llu dropped %llu",
			(unsigned long long)atomic_load(&inode->ra_hits),
			(unsigned long long)atomic_load(&inode->ra_dropped));
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

static void reply_xattr(fuse_req_t req, const char *val, long len, size_t size)
{
	if (len < 0)
		fuse_reply_err(req, (int)-len);
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
	const void *stored;
	char val[256], *out = val;
	long len = -ENOENT;
	size_t n;

	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, ino);
	if (inode && !strncmp(name, PHX_PREFIX, strlen(PHX_PREFIX))) {
		len = phx_value(fs, inode, name, fuse_req_ctx(req)->uid, val,
				sizeof(val));
	} else if (inode && stored_name(name)) {
		len = stored_name(name);
	} else if (inode) {
		stored = phxfs_xattr_value(inode, name, &n);
		len = stored ? (long)n : -ENODATA;
		out = stored && size >= n ? malloc(n + 1) : val;
		if (!out)
			len = -ENOMEM;
		else if (out != val)
			memcpy(out, stored, n);
	}
	pthread_mutex_unlock(&fs->lock);
	reply_xattr(req, out, len, size);
	if (out != val)
		free(out);
}

static void phxfs_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct phxfs *fs = phxfs_fs(req);
	struct phxfs_inode *inode;
	char val[256], *list = NULL;
	size_t len = 0, cap;
	unsigned int i;

	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, ino);
	cap = inode ? phxfs_xattr_stored(inode) + sizeof(val) : 0;
	list = inode ? malloc(cap) : NULL;
	for (i = 0; list && i < sizeof(phx_names) / sizeof(phx_names[0]); i++) {
		if (phx_value(fs, inode, phx_names[i], fuse_req_ctx(req)->uid,
			      val, sizeof(val)) < 0)
			continue;
		if (!strcmp(phx_names[i], "user.phx.socket") &&
		    inode != fs->root)
			continue;
		len += (size_t)snprintf(list + len, cap - len, "%s",
					phx_names[i]) +
		       1;
	}
	if (list)
		len += phxfs_xattr_names(inode, list + len);
	pthread_mutex_unlock(&fs->lock);
	reply_xattr(req, list,
		    !inode ? -ENOENT :
		    !list  ? -ENOMEM :
			     (long)len,
		    size);
	free(list);
}

/*
 * -errno for a change of attribute @name that the file system refuses
 * outright, or 0: the user.phx.* ones are its own, and only the stored
 * namespaces can change.
 */
static int may_change(const char *name)
{
	if (!strncmp(name, PHX_PREFIX, strlen(PHX_PREFIX)))
		return -EPERM;
	return stored_name(name);
}

/* Set (@value non-NULL) or remove @name of inode @ino; replies to @req. */
static void change_xattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			 const char *value, size_t size, int flags)
{
	struct phxfs *fs = phxfs_fs(req);
	struct phxfs_inode *inode;
	int err = may_change(name);

	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, ino);
	if (!inode)
		err = -ENOENT;
	else if (value)
		err = phxfs_xattr_set(fs, inode, name, value, size, flags);
	else
		err = phxfs_xattr_remove(fs, inode, name);
	if (!err)
		phxfs_touch(&inode->ctime);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_err(req, -err);
}

static void phxfs_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			   const char *value, size_t size, int flags)
{
	/* an empty value is a value */
	change_xattr(req, ino, name, value ? value : "", size, flags);
}

static void phxfs_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	change_xattr(req, ino, name, NULL, 0, 0);
}

void phxfs_xattr_ops(struct fuse_lowlevel_ops *o)
{
	o->setxattr = phxfs_setxattr;
	o->getxattr = phxfs_getxattr;
	o->listxattr = phxfs_listxattr;
	o->removexattr = phxfs_removexattr;
}
