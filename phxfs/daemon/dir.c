/* SPDX-License-Identifier: MIT */
/* dir.c - phxfs's names and directories. */
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

struct dir_ent {
	fuse_ino_t ino;
	mode_t mode;
	char *name;
};

/*
 * An open directory: its entries as they were when it was opened, or
 * when it was last read again from its start (rewinddir), so that what
 * was added and removed since shows then, as POSIX asks.
 */
struct dir_snap {
	size_t n;
	bool read; /* served a readdir since it was taken */
	struct dir_ent *ents;
};

/* Caller holds fs->lock. */
static struct phxfs_inode *dir_of(struct phxfs *fs, fuse_ino_t ino, int *err)
{
	struct phxfs_inode *dir = phxfs_inode_get(fs, ino);

	*err = !dir ? -ENOENT : !S_ISDIR(dir->mode) ? -ENOTDIR : 0;
	return *err ? NULL : dir;
}

/* -errno for a name a new entry may not have, or 0. */
static int check_name(struct phxfs *fs, struct phxfs_inode *dir,
		      const char *name)
{
	if (strlen(name) > PHXFS_NAME_MAX)
		return -ENAMETOOLONG;
	if (!strncmp(name, PHXFS_RESERVED_PREFIX,
		     strlen(PHXFS_RESERVED_PREFIX)))
		return -EINVAL;
	if (dir == fs->root)
		return -EPERM; /* the top level holds the devices only */
	return 0;
}

/* @dir's entry @name, or NULL with *@err = -ENOENT; fs->lock held. */
static struct phxfs_dentry *entry_in(struct phxfs *fs, struct phxfs_inode *dir,
				     const char *name, int *err)
{
	struct phxfs_dentry *d = phxfs_dentry_find(fs, dir, name);

	*err = d ? 0 : -ENOENT;
	return d;
}

/* Fill @e for @inode and count the kernel's new reference; fs->lock held. */
static void entry_of(struct phxfs *fs, struct phxfs_inode *inode,
		     struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = inode->ino;
	e->generation = 1;
	e->attr_timeout = PHXFS_ATTR_TIMEOUT;
	e->entry_timeout = PHXFS_ATTR_TIMEOUT;
	phxfs_fill_stat(fs, inode, &e->attr);
	inode->nlookup++;
}

static void reply_node(fuse_req_t req, int err, struct fuse_entry_param *e)
{
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_entry(req, e);
}

static void phxfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct phxfs *fs = phxfs_fs(req);
	struct fuse_entry_param e;
	struct phxfs_inode *dir;
	struct phxfs_dentry *d;
	int err;

	pthread_mutex_lock(&fs->lock);
	dir = dir_of(fs, parent, &err);
	if (!err && strlen(name) > PHXFS_NAME_MAX)
		err = -ENAMETOOLONG;
	d = err ? NULL : entry_in(fs, dir, name, &err);
	if (d)
		entry_of(fs, d->inode, &e);
	pthread_mutex_unlock(&fs->lock);
	reply_node(req, err, &e);
}

static void forget_one(struct phxfs *fs, fuse_ino_t ino, uint64_t n)
{
	struct phxfs_inode *inode = phxfs_inode_get(fs, ino);

	if (inode && ino != FUSE_ROOT_ID)
		phxfs_inode_unref(fs, inode, n, 0);
}

static void phxfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct phxfs *fs = phxfs_fs(req);

	pthread_mutex_lock(&fs->lock);
	forget_one(fs, ino, nlookup);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_none(req);
}

static void phxfs_forget_multi(fuse_req_t req, size_t count,
			       struct fuse_forget_data *forgets)
{
	struct phxfs *fs = phxfs_fs(req);
	size_t i;

	pthread_mutex_lock(&fs->lock);
	for (i = 0; i < count; i++)
		forget_one(fs, forgets[i].ino, forgets[i].nlookup);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_none(req);
}

static int make_node(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, dev_t rdev, const char *link, bool open,
		     struct fuse_entry_param *e)
{
	struct phxfs *fs = phxfs_fs(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct phxfs_inode *dir, *inode;
	gid_t gid = ctx->gid;
	int err;

	pthread_mutex_lock(&fs->lock);
	dir = dir_of(fs, parent, &err);
	if (err)
		goto out;
	err = check_name(fs, dir, name);
	if (err)
		goto out;
	if (phxfs_dentry_find(fs, dir, name)) {
		err = -EEXIST;
		goto out;
	}
	if (dir->mode & S_ISGID) {
		gid = dir->gid;
		if (S_ISDIR(mode))
			mode |= S_ISGID;
	}
	inode = phxfs_inode_new(fs, dir->dev, mode, ctx->uid, gid);
	if (!inode) {
		err = -errno;
		goto out;
	}
	inode->rdev = rdev;
	if (link)
		inode->symlink = strdup(link);
	err = link && !inode->symlink ? -ENOMEM :
					phxfs_dentry_add(fs, dir, name, inode);
	if (err) {
		inode->nlink = 0;
		phxfs_inode_unref(fs, inode, 0, 0);
		goto out;
	}
	inode->nopen += open;
	entry_of(fs, inode, e);
out:
	pthread_mutex_unlock(&fs->lock);
	return err;
}

static void phxfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
			mode_t mode, dev_t rdev)
{
	struct fuse_entry_param e;

	/*
	 * FIFOs, sockets and device nodes are names only: the kernel serves
	 * them (and refuses device nodes on a nodev mount).  The kernel has
	 * checked CAP_MKNOD for device nodes.
	 */
	if (!S_ISREG(mode) && !S_ISFIFO(mode) && !S_ISSOCK(mode) &&
	    !S_ISCHR(mode) && !S_ISBLK(mode)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (!S_ISCHR(mode) && !S_ISBLK(mode))
		rdev = 0;
	reply_node(req,
		   make_node(req, parent, name, mode, rdev, NULL, false, &e),
		   &e);
}

static void phxfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
			mode_t mode)
{
	struct fuse_entry_param e;

	reply_node(req,
		   make_node(req, parent, name, S_IFDIR | (mode & 07777), 0,
			     NULL, false, &e),
		   &e);
}

static void phxfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
			  const char *name)
{
	struct fuse_entry_param e;

	reply_node(req,
		   make_node(req, parent, name, S_IFLNK | 0777, 0, link, false,
			     &e),
		   &e);
}

static void phxfs_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct phxfs *fs = phxfs_fs(req);
	struct phxfs_inode *inode;
	char *target = NULL;

	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, ino);
	if (inode && inode->symlink)
		target = strdup(inode->symlink);
	pthread_mutex_unlock(&fs->lock);
	if (!target) {
		fuse_reply_err(req, inode ? EINVAL : ENOENT);
		return;
	}
	fuse_reply_readlink(req, target);
	free(target);
}

static void phxfs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		       const char *newname)
{
	struct phxfs *fs = phxfs_fs(req);
	struct phxfs_inode *inode, *dir;
	struct fuse_entry_param e;
	int err;

	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, ino);
	dir = dir_of(fs, newparent, &err);
	if (err || !inode) {
		err = err ? err : -ENOENT;
		goto out;
	}
	err = check_name(fs, dir, newname);
	if (err)
		goto out;
	if (S_ISDIR(inode->mode)) {
		err = -EPERM;
		goto out;
	}
	if (inode->dev != dir->dev) {
		err = -EXDEV;
		goto out;
	}
	err = phxfs_dentry_find(fs, dir, newname) ?
		      -EEXIST :
		      phxfs_dentry_add(fs, dir, newname, inode);
	if (err)
		goto out;
	inode->nlink++;
	phxfs_touch(&inode->ctime);
	entry_of(fs, inode, &e);
out:
	pthread_mutex_unlock(&fs->lock);
	reply_node(req, err, &e);
}

/* Remove @name from @parent: a directory when @dir is set, else not one. */
static void remove_entry(fuse_req_t req, fuse_ino_t parent, const char *name,
			 bool dir)
{
	struct phxfs *fs = phxfs_fs(req);
	struct phxfs_inode *pdir, *inode;
	struct phxfs_dentry *d;
	int err;

	pthread_mutex_lock(&fs->lock);
	pdir = dir_of(fs, parent, &err);
	d = err ? NULL : entry_in(fs, pdir, name, &err);
	if (err)
		goto out;
	inode = d->inode;
	if (pdir == fs->root)
		err = -EBUSY; /* a device directory */
	else if (dir && !S_ISDIR(inode->mode))
		err = -ENOTDIR;
	else if (!dir && S_ISDIR(inode->mode))
		err = -EISDIR;
	else if (dir && inode->nchildren)
		err = -ENOTEMPTY;
	if (err)
		goto out;
	phxfs_dentry_remove(fs, d);
	inode->nlink = dir ? 0 : inode->nlink - 1;
	phxfs_touch(&inode->ctime);
	phxfs_inode_unref(fs, inode, 0, 0);
out:
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_err(req, -err);
}

static void phxfs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_entry(req, parent, name, false);
}

static void phxfs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_entry(req, parent, name, true);
}

/* Is @dir @anc or below it?  fs->lock held. */
static bool is_below(struct phxfs *fs, struct phxfs_inode *dir,
		     struct phxfs_inode *anc)
{
	for (;;) {
		if (dir == anc)
			return true;
		if (dir == fs->root)
			return false;
		dir = dir->parent;
	}
}

/* -errno for moving @src over @dst (may be NULL) into @to, or 0. */
static int check_rename(struct phxfs *fs, struct phxfs_inode *src,
			struct phxfs_inode *dst, struct phxfs_inode *to,
			unsigned int flags)
{
	if (flags & ~RENAME_NOREPLACE)
		return -EINVAL;
	if (dst && (flags & RENAME_NOREPLACE))
		return -EEXIST;
	if (S_ISDIR(src->mode) && is_below(fs, to, src))
		return -EINVAL;
	if (src->dev != to->dev && (S_ISDIR(src->mode) || src->nlink > 1))
		return -EXDEV; /* mv copies those itself */
	if (!dst)
		return 0;
	if (S_ISDIR(dst->mode) && !S_ISDIR(src->mode))
		return -EISDIR;
	if (!S_ISDIR(dst->mode) && S_ISDIR(src->mode))
		return -ENOTDIR;
	if (S_ISDIR(dst->mode) && dst->nchildren)
		return -ENOTEMPTY;
	return 0;
}

/* RENAME_EXCHANGE: swap the inodes of two entries; fs->lock held. */
static int exchange(struct phxfs *fs, struct phxfs_dentry *sd,
		    struct phxfs_dentry *dd)
{
	struct phxfs_inode *a = sd->inode, *b = dd->inode;
	struct phxfs_inode *from = sd->parent, *to = dd->parent;

	if (from->dev != to->dev)
		return -EXDEV;
	if ((S_ISDIR(a->mode) && is_below(fs, to, a)) ||
	    (S_ISDIR(b->mode) && is_below(fs, from, b)))
		return -EINVAL;
	sd->inode = b;
	dd->inode = a;
	fs->dentry_gen++; /* a STATUS walk finds its path again */
	if (S_ISDIR(a->mode)) {
		a->parent = to;
		from->nlink--;
		to->nlink++;
	}
	if (S_ISDIR(b->mode)) {
		b->parent = from;
		to->nlink--;
		from->nlink++;
	}
	phxfs_touch(&a->ctime);
	b->ctime = a->ctime;
	from->mtime = from->ctime = to->mtime = to->ctime = a->ctime;
	return 0;
}

static void phxfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
			 fuse_ino_t newparent, const char *newname,
			 unsigned int flags)
{
	struct phxfs *fs = phxfs_fs(req);
	struct phxfs_inode *from, *to, *src, *dst = NULL;
	struct phxfs_dentry *sd, *dd, *nd;
	int err;

	pthread_mutex_lock(&fs->lock);
	from = dir_of(fs, parent, &err);
	to = err ? NULL : dir_of(fs, newparent, &err);
	if (err)
		goto out;
	sd = entry_in(fs, from, name, &err);
	if (err)
		goto out;
	src = sd->inode;
	err = from == fs->root ? -EBUSY : check_name(fs, to, newname);
	if (err)
		goto out;
	dd = phxfs_dentry_find(fs, to, newname);
	dst = dd ? dd->inode : NULL;
	if (flags & RENAME_EXCHANGE) {
		err = (flags & RENAME_NOREPLACE) ? -EINVAL :
		      !dd			 ? -ENOENT :
		      dst == src		 ? 0 :
						   exchange(fs, sd, dd);
		goto out;
	}
	if (dst == src)
		goto out;
	err = check_rename(fs, src, dst, to, flags);
	if (err)
		goto out;
	/*
	 * The new entry is made first: past this point nothing fails but the
	 * copy to another device, which leaves both names as they were.
	 */
	nd = phxfs_dentry_new(newname);
	if (!nd) {
		err = -ENOMEM;
		goto out;
	}
	if (src->dev != to->dev) {
		/* A file to another device: a device-to-device copy. */
		pthread_rwlock_wrlock(&src->io_lock);
		err = phxfs_data_move(src, to->dev, fuse_req_ctx(req)->uid);
		pthread_rwlock_unlock(&src->io_lock);
		if (err) {
			free(nd);
			goto out;
		}
	}
	if (dd) {
		phxfs_dentry_remove(fs, dd);
		dst->nlink = S_ISDIR(dst->mode) ? 0 : dst->nlink - 1;
		phxfs_touch(&dst->ctime);
	}
	phxfs_dentry_remove(fs, sd);
	phxfs_dentry_link(fs, to, nd, src);
	phxfs_touch(&src->ctime);
	if (dst)
		phxfs_inode_unref(fs, dst, 0, 0);
out:
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_err(req, -err);
}

static void phxfs_create(fuse_req_t req, fuse_ino_t parent, const char *name,
			 mode_t mode, struct fuse_file_info *fi)
{
	struct phxfs *fs = phxfs_fs(req);
	struct phxfs_inode *inode;
	struct fuse_entry_param e;
	int err;

	err = make_node(req, parent, name, S_IFREG | (mode & 07777), 0, NULL,
			true, &e);
	if (err) {
		fuse_reply_err(req, -err);
		return;
	}
	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, e.ino);
	pthread_mutex_unlock(&fs->lock);
	err = phxfs_open_file(fs, req, inode, fi);
	if (err) {
		/* The name stays, as after a failed open of an existing file. */
		pthread_mutex_lock(&fs->lock);
		phxfs_inode_unref(fs, inode, 1, 1);
		pthread_mutex_unlock(&fs->lock);
		fuse_reply_err(req, -err);
		return;
	}
	fuse_reply_create(req, &e, fi);
}

static void snap_free_ents(struct dir_ent *ents, size_t n)
{
	size_t i;

	for (i = 0; ents && i < n; i++)
		free(ents[i].name);
	free(ents);
}

/* Take the entries of directory @ino into @s; 0 or -errno (@s as it was). */
static int snap_take(struct phxfs *fs, fuse_ino_t ino, struct dir_snap *s)
{
	struct phxfs_inode *dir;
	struct phxfs_dentry *d;
	struct dir_ent *ents = NULL;
	size_t i = 0, n = 0;
	int err;

	pthread_mutex_lock(&fs->lock);
	dir = dir_of(fs, ino, &err);
	if (err)
		goto out;
	ents = calloc(dir->nchildren + 2, sizeof(*ents));
	if (!ents) {
		err = -ENOMEM;
		goto out;
	}
	ents[0].ino = dir->ino;
	ents[0].name = strdup(".");
	ents[1].ino = dir->parent->ino;
	ents[1].name = strdup("..");
	ents[0].mode = ents[1].mode = S_IFDIR;
	for (i = 2, d = dir->children; d; d = d->sib_next, i++) {
		ents[i].ino = d->inode->ino;
		ents[i].mode = d->inode->mode;
		ents[i].name = strdup(d->name);
	}
	n = i;
	for (i = 0; i < n; i++)
		if (!ents[i].name)
			err = -ENOMEM;
out:
	pthread_mutex_unlock(&fs->lock);
	if (err) {
		snap_free_ents(ents, n);
		return err;
	}
	snap_free_ents(s->ents, s->n);
	s->ents = ents;
	s->n = n;
	s->read = false;
	return 0;
}

static void phxfs_opendir(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct dir_snap *s = calloc(1, sizeof(*s));
	int err = s ? snap_take(phxfs_fs(req), ino, s) : -ENOMEM;

	if (err) {
		free(s);
		fuse_reply_err(req, -err);
		return;
	}
	fi->fh = (uintptr_t)s;
	fuse_reply_open(req, fi);
}

static void phxfs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
			  off_t off, struct fuse_file_info *fi)
{
	struct dir_snap *s = (struct dir_snap *)(uintptr_t)fi->fh;
	char *buf = malloc(size);
	size_t used = 0, i;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	/*
	 * Read again from the start: the entries as they are now (the
	 * kernel serializes the readdirs of one open directory).  Where
	 * they cannot be taken, the ones taken before serve.
	 */
	if (!off && s->read)
		snap_take(phxfs_fs(req), ino, s);
	s->read = true;
	for (i = (size_t)off; i < s->n; i++) {
		struct stat st = { .st_ino = s->ents[i].ino,
				   .st_mode = s->ents[i].mode };
		size_t len =
			fuse_add_direntry(req, buf + used, size - used,
					  s->ents[i].name, &st, (off_t)i + 1);

		if (len > size - used)
			break;
		used += len;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void phxfs_releasedir(fuse_req_t req, fuse_ino_t ino,
			     struct fuse_file_info *fi)
{
	struct dir_snap *s = (struct dir_snap *)(uintptr_t)fi->fh;

	snap_free_ents(s->ents, s->n);
	free(s);
	fuse_reply_err(req, 0);
}

#if FUSE_VERSION >= FUSE_MAKE_VERSION(3, 17)
/* O_TMPFILE: an open regular file without a name; linkat() may give one. */
static void phxfs_tmpfile(fuse_req_t req, fuse_ino_t parent, mode_t mode,
			  struct fuse_file_info *fi)
{
	struct phxfs *fs = phxfs_fs(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct phxfs_inode *dir, *inode = NULL;
	struct fuse_entry_param e;
	int err;

	pthread_mutex_lock(&fs->lock);
	dir = dir_of(fs, parent, &err);
	if (!err && dir == fs->root)
		err = -EPERM;
	if (!err)
		inode = phxfs_inode_new(
			fs, dir->dev, S_IFREG | (mode & 07777), ctx->uid,
			dir->mode & S_ISGID ? dir->gid : ctx->gid);
	if (!err && !inode)
		err = -errno;
	if (!err) {
		inode->nlink = 0;
		inode->nopen = 1;
		entry_of(fs, inode, &e);
	}
	pthread_mutex_unlock(&fs->lock);
	if (!err) {
		err = phxfs_open_file(fs, req, inode, fi);
		if (err) {
			pthread_mutex_lock(&fs->lock);
			phxfs_inode_unref(fs, inode, 1, 1);
			pthread_mutex_unlock(&fs->lock);
		}
	}
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_create(req, &e, fi);
}
#endif

void phxfs_dir_ops(struct fuse_lowlevel_ops *o)
{
	o->lookup = phxfs_lookup;
	o->forget = phxfs_forget;
	o->forget_multi = phxfs_forget_multi;
	o->readlink = phxfs_readlink;
	o->mknod = phxfs_mknod;
	o->mkdir = phxfs_mkdir;
	o->unlink = phxfs_unlink;
	o->rmdir = phxfs_rmdir;
	o->symlink = phxfs_symlink;
	o->rename = phxfs_rename;
	o->link = phxfs_link;
	o->create = phxfs_create;
#if FUSE_VERSION >= FUSE_MAKE_VERSION(3, 17)
	o->tmpfile = phxfs_tmpfile;
#endif
	o->opendir = phxfs_opendir;
	o->readdir = phxfs_readdir;
	o->releasedir = phxfs_releasedir;
}
