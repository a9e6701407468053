/* SPDX-License-Identifier: MIT */
/*
 * ops.c - phxfs's FUSE operations (low-level API).
 *
 * Regular files, directories and symlinks; a regular file's bytes live in
 * one sparse device buffer.  Not supported: device nodes and FIFOs (EPERM),
 * RENAME_EXCHANGE (EINVAL), hole punching (EOPNOTSUPP), user xattrs other
 * than the read-only user.phx.* ones (ENOTSUP), and atime updates (files
 * behave as if mounted noatime).
 */
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

#define ATTR_TIMEOUT 1.0

struct dir_snap {
	size_t n;
	struct {
		fuse_ino_t ino;
		mode_t mode;
		char *name;
	} ents[];
};

static struct phxfs *fs_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/*
 * The inode of an open file (fh is set in open/create); its low bit says
 * that the kernel serves the file through passthrough.
 */
static struct phxfs_inode *file_of(struct fuse_file_info *fi)
{
	return (struct phxfs_inode *)(uintptr_t)(fi->fh & ~(uint64_t)1);
}

static bool file_passthrough(struct fuse_file_info *fi)
{
	return fi->fh & 1;
}

/* Caller holds fs->lock. */
static struct phxfs_inode *dir_of(struct phxfs *fs, fuse_ino_t ino, int *err)
{
	struct phxfs_inode *dir = phxfs_inode_get(fs, ino);

	*err = !dir ? ENOENT : !S_ISDIR(dir->mode) ? ENOTDIR : 0;
	return *err ? NULL : dir;
}

/* errno for a name a new entry may not have, or 0. */
static int check_name(struct phxfs *fs, struct phxfs_inode *dir,
		      const char *name)
{
	if (strlen(name) > PHXFS_NAME_MAX)
		return ENAMETOOLONG;
	if (!strncmp(name, PHXFS_RESERVED_PREFIX,
		     strlen(PHXFS_RESERVED_PREFIX)))
		return EINVAL;
	if (dir == fs->root)
		return EPERM; /* the top level holds the devices only */
	return 0;
}

/* Fill @e for @inode and count the kernel's new reference; fs->lock held. */
static void entry_of(struct phxfs *fs, struct phxfs_inode *inode,
		     struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = inode->ino;
	e->generation = 1;
	e->attr_timeout = ATTR_TIMEOUT;
	e->entry_timeout = ATTR_TIMEOUT;
	phxfs_fill_stat(fs, inode, &e->attr);
	inode->nlookup++;
}

/* A host buffer per worker thread for reads out of device memory. */
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
 * Pinned buffers for reads out of device memory, shared by all workers:
 * a device-to-host copy into pinned memory runs at the bus's speed, while
 * the driver stages one into pageable memory at a fraction of it.  They
 * are pinned once and kept; a request larger than one, or one arriving
 * when all are in use, takes the thread's pageable buffer instead.  Each
 * holds the largest request (max_write); together at most RBUF_BYTES, and
 * never fewer than RBUF_MIN of them.
 */
#define RBUF_BYTES (64U << 20)
#define RBUF_MIN 4U
#define RBUF_MAX 32U

static pthread_mutex_t rbuf_lock = PTHREAD_MUTEX_INITIALIZER;
static void *rbuf_free[RBUF_MAX]; /* protected by rbuf_lock */
static unsigned int rbuf_nfree, rbuf_count; /* protected by rbuf_lock */
/* set in phxfs_init(), before the first request */
static size_t rbuf_len;
static unsigned int rbuf_max;

static void rbuf_setup(const struct phxfs *fs)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), n;

	rbuf_len = (fs->max_write + page - 1) / page * page;
	n = RBUF_BYTES / rbuf_len;
	rbuf_max = n < RBUF_MIN ? RBUF_MIN :
		   n > RBUF_MAX ? RBUF_MAX :
				  (unsigned int)n;
}

static void *rbuf_get(struct phxfs *fs, size_t len)
{
	void *p = NULL;

	if (len > rbuf_len || !fs->ndevs)
		return NULL;
	pthread_mutex_lock(&rbuf_lock);
	if (rbuf_nfree) {
		p = rbuf_free[--rbuf_nfree];
		pthread_mutex_unlock(&rbuf_lock);
		return p;
	}
	if (rbuf_count >= rbuf_max) {
		pthread_mutex_unlock(&rbuf_lock);
		return NULL;
	}
	rbuf_count++;
	pthread_mutex_unlock(&rbuf_lock);

	p = mmap(NULL, rbuf_len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (p == MAP_FAILED) {
		pthread_mutex_lock(&rbuf_lock);
		rbuf_count--;
		pthread_mutex_unlock(&rbuf_lock);
		return NULL;
	}
	/* pinned for every GPU; unpinned memory still works, only slower */
	phx_host_register(fs->devs[0].dev, p, rbuf_len);
	return p;
}

static void rbuf_put(void *p)
{
	pthread_mutex_lock(&rbuf_lock);
	rbuf_free[rbuf_nfree++] = p;
	pthread_mutex_unlock(&rbuf_lock);
}

static void phxfs_init(void *userdata, struct fuse_conn_info *conn)
{
	struct phxfs *fs = userdata;

	/*
	 * At most what this libfuse's request buffer holds (parse_sizes()
	 * checked): larger, and every read of /dev/fuse fails with EINVAL.
	 * libfuse asks the kernel for max_pages to match, for reads too.
	 */
	conn->max_write = (unsigned int)fs->max_write;
	rbuf_setup(fs);
	conn->max_readahead = conn->max_readahead > (1u << 20) ?
				      conn->max_readahead :
				      (1u << 20);
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	conn->time_gran = 1;
	/* Requests arrive in one buffer we copy from: splicing would not help. */
	phxfs_want(conn, FUSE_CAP_SPLICE_READ, false);
	phxfs_want(conn, FUSE_CAP_SPLICE_WRITE, false);
	phxfs_want(conn, FUSE_CAP_SPLICE_MOVE, false);
	if (fs->opts.writeback && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
		phxfs_want(conn, FUSE_CAP_WRITEBACK_CACHE, true);
	if (conn->capable & FUSE_CAP_ASYNC_DIO)
		phxfs_want(conn, FUSE_CAP_ASYNC_DIO, true);
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		phxfs_want(conn, FUSE_CAP_PARALLEL_DIROPS, true);
	phxfs_backing_init(fs, conn);
}

static void phxfs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct phxfs *fs = fs_of(req);
	struct fuse_entry_param e;
	struct phxfs_inode *dir;
	struct phxfs_dentry *d;
	int err;

	pthread_mutex_lock(&fs->lock);
	dir = dir_of(fs, parent, &err);
	if (err)
		goto out_err;
	if (strlen(name) > PHXFS_NAME_MAX) {
		err = ENAMETOOLONG;
		goto out_err;
	}
	d = phxfs_dentry_find(fs, dir, name);
	if (!d) {
		err = ENOENT;
		goto out_err;
	}
	entry_of(fs, d->inode, &e);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_entry(req, &e);
	return;

out_err:
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_err(req, err);
}

static void forget_one(struct phxfs *fs, fuse_ino_t ino, uint64_t n)
{
	struct phxfs_inode *inode = phxfs_inode_get(fs, ino);

	if (inode && ino != FUSE_ROOT_ID)
		phxfs_inode_unref(fs, inode, n, 0);
}

static void phxfs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct phxfs *fs = fs_of(req);

	pthread_mutex_lock(&fs->lock);
	forget_one(fs, ino, nlookup);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_none(req);
}

static void phxfs_forget_multi(fuse_req_t req, size_t count,
			       struct fuse_forget_data *forgets)
{
	struct phxfs *fs = fs_of(req);
	size_t i;

	pthread_mutex_lock(&fs->lock);
	for (i = 0; i < count; i++)
		forget_one(fs, forgets[i].ino, forgets[i].nlookup);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_none(req);
}

static void phxfs_getattr(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct phxfs *fs = fs_of(req);
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
		fuse_reply_attr(req, &st, ATTR_TIMEOUT);
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
	struct phxfs *fs = fs_of(req);
	struct phxfs_inode *inode;
	struct stat st;
	int err = 0;

	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, ino);
	pthread_mutex_unlock(&fs->lock);
	if (!inode) {
		err = ENOENT;
		goto out_err;
	}
	if (to_set & FUSE_SET_ATTR_SIZE) {
		if (!S_ISREG(inode->mode)) {
			err = S_ISDIR(inode->mode) ? EISDIR : EINVAL;
			goto out_err;
		}
		if (attr->st_size < 0 ||
		    (uint64_t)attr->st_size > PHXFS_MAX_FILE) {
			err = EFBIG;
			goto out_err;
		}
		pthread_rwlock_wrlock(&inode->io_lock);
		err = -phxfs_data_resize(inode, (uint64_t)attr->st_size);
		pthread_rwlock_unlock(&inode->io_lock);
		if (err)
			goto out_err;
	}
	pthread_mutex_lock(&fs->lock);
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
	fuse_reply_attr(req, &st, ATTR_TIMEOUT);
	return;

out_err:
	fuse_reply_err(req, err);
}

/*
 * Create an entry named @name in @parent; a regular file is also opened
 * (nopen) when @open is set.  Replies to @req unless @fi is set.
 */
static int make_node(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, const char *link, bool open,
		     struct fuse_entry_param *e)
{
	struct phxfs *fs = fs_of(req);
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
		err = EEXIST;
		goto out;
	}
	if (dir->mode & S_ISGID) {
		gid = dir->gid;
		if (S_ISDIR(mode))
			mode |= S_ISGID;
	}
	inode = phxfs_inode_new(fs, dir->dev, mode, ctx->uid, gid);
	if (!inode) {
		err = ENOMEM;
		goto out;
	}
	if (link)
		inode->symlink = strdup(link);
	if ((link && !inode->symlink) ||
	    phxfs_dentry_add(fs, dir, name, inode)) {
		inode->nlink = 0;
		phxfs_inode_unref(fs, inode, 0, 0);
		err = ENOMEM;
		goto out;
	}
	inode->nopen += open;
	entry_of(fs, inode, e);
out:
	pthread_mutex_unlock(&fs->lock);
	return err;
}

static void reply_node(fuse_req_t req, int err, struct fuse_entry_param *e)
{
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_entry(req, e);
}

static void phxfs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
			mode_t mode, dev_t rdev)
{
	struct fuse_entry_param e;

	if (!S_ISREG(mode)) {
		fuse_reply_err(req, EPERM);
		return;
	}
	reply_node(req, make_node(req, parent, name, mode, NULL, false, &e),
		   &e);
}

static void phxfs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
			mode_t mode)
{
	struct fuse_entry_param e;

	reply_node(req,
		   make_node(req, parent, name, S_IFDIR | (mode & 07777), NULL,
			     false, &e),
		   &e);
}

static void phxfs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
			  const char *name)
{
	struct fuse_entry_param e;

	reply_node(
		req,
		make_node(req, parent, name, S_IFLNK | 0777, link, false, &e),
		&e);
}

static void phxfs_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct phxfs *fs = fs_of(req);
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
	struct phxfs *fs = fs_of(req);
	struct phxfs_inode *inode, *dir;
	struct fuse_entry_param e;
	int err;

	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, ino);
	dir = dir_of(fs, newparent, &err);
	if (err || !inode) {
		err = err ? err : ENOENT;
		goto out_err;
	}
	err = check_name(fs, dir, newname);
	if (err)
		goto out_err;
	if (S_ISDIR(inode->mode)) {
		err = EPERM;
		goto out_err;
	}
	if (inode->dev != dir->dev) {
		err = EXDEV;
		goto out_err;
	}
	if (phxfs_dentry_find(fs, dir, newname)) {
		err = EEXIST;
		goto out_err;
	}
	if (phxfs_dentry_add(fs, dir, newname, inode)) {
		err = ENOMEM;
		goto out_err;
	}
	inode->nlink++;
	phxfs_touch(&inode->ctime);
	entry_of(fs, inode, &e);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_entry(req, &e);
	return;

out_err:
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_err(req, err);
}

/* Remove @name from @parent: a directory when @dir is set, else not one. */
static void remove_entry(fuse_req_t req, fuse_ino_t parent, const char *name,
			 bool dir)
{
	struct phxfs *fs = fs_of(req);
	struct phxfs_inode *pdir, *inode;
	struct phxfs_dentry *d;
	int err;

	pthread_mutex_lock(&fs->lock);
	pdir = dir_of(fs, parent, &err);
	if (err)
		goto out;
	d = phxfs_dentry_find(fs, pdir, name);
	if (!d) {
		err = ENOENT;
		goto out;
	}
	inode = d->inode;
	if (pdir == fs->root)
		err = EBUSY; /* a device directory */
	else if (dir && !S_ISDIR(inode->mode))
		err = ENOTDIR;
	else if (!dir && S_ISDIR(inode->mode))
		err = EISDIR;
	else if (dir && inode->nchildren)
		err = ENOTEMPTY;
	if (err)
		goto out;
	phxfs_dentry_remove(fs, d);
	inode->nlink = dir ? 0 : inode->nlink - 1;
	phxfs_touch(&inode->ctime);
	phxfs_inode_unref(fs, inode, 0, 0);
out:
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_err(req, err);
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

/* errno for moving @src over @dst (may be NULL) into @to, or 0. */
static int check_rename(struct phxfs *fs, struct phxfs_inode *src,
			struct phxfs_inode *dst, struct phxfs_inode *to,
			unsigned int flags)
{
	if (flags & ~RENAME_NOREPLACE)
		return EINVAL;
	if (dst && (flags & RENAME_NOREPLACE))
		return EEXIST;
	if (S_ISDIR(src->mode) && is_below(fs, to, src))
		return EINVAL;
	if (src->dev != to->dev && (S_ISDIR(src->mode) || src->nlink > 1))
		return EXDEV; /* mv copies those itself */
	if (!dst)
		return 0;
	if (S_ISDIR(dst->mode) && !S_ISDIR(src->mode))
		return EISDIR;
	if (!S_ISDIR(dst->mode) && S_ISDIR(src->mode))
		return ENOTDIR;
	if (S_ISDIR(dst->mode) && dst->nchildren)
		return ENOTEMPTY;
	return 0;
}

static void phxfs_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
			 fuse_ino_t newparent, const char *newname,
			 unsigned int flags)
{
	struct phxfs *fs = fs_of(req);
	struct phxfs_inode *from, *to, *src, *dst = NULL;
	struct phxfs_dentry *sd, *dd;
	int err;

	pthread_mutex_lock(&fs->lock);
	from = dir_of(fs, parent, &err);
	to = err ? NULL : dir_of(fs, newparent, &err);
	if (err)
		goto out;
	sd = phxfs_dentry_find(fs, from, name);
	if (!sd) {
		err = ENOENT;
		goto out;
	}
	src = sd->inode;
	err = from == fs->root ? EBUSY : check_name(fs, to, newname);
	if (err)
		goto out;
	dd = phxfs_dentry_find(fs, to, newname);
	dst = dd ? dd->inode : NULL;
	if (dst == src)
		goto out;
	err = check_rename(fs, src, dst, to, flags);
	if (err)
		goto out;
	if (src->dev != to->dev) {
		/* A file to another device: a device-to-device copy. */
		pthread_rwlock_wrlock(&src->io_lock);
		err = -phxfs_data_move(src, to->dev);
		pthread_rwlock_unlock(&src->io_lock);
		if (err)
			goto out;
	}
	if (dd) {
		phxfs_dentry_remove(fs, dd);
		dst->nlink = S_ISDIR(dst->mode) ? 0 : dst->nlink - 1;
		phxfs_touch(&dst->ctime);
	}
	phxfs_dentry_remove(fs, sd);
	err = phxfs_dentry_add(fs, to, newname, src) ? ENOMEM : 0;
	phxfs_touch(&src->ctime);
	if (dst)
		phxfs_inode_unref(fs, dst, 0, 0);
out:
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_err(req, err);
}

static void open_flags(struct phxfs *fs, struct fuse_file_info *fi)
{
	fi->direct_io = !fs->opts.writeback;
#if FUSE_VERSION >= FUSE_MAKE_VERSION(3, 15)
	fi->parallel_direct_writes = !fs->opts.writeback;
#endif
}

/*
 * Set up @fi for regular file @inode, which holds an open reference:
 * truncate it for O_TRUNC, and on a passthrough device give the kernel
 * its range file, with room to grow when it is opened for writing.
 */
static int open_file(struct phxfs *fs, fuse_req_t req,
		     struct phxfs_inode *inode, struct fuse_file_info *fi)
{
	bool pass = false;
	int err = 0;

	pthread_rwlock_wrlock(&inode->io_lock);
	if (fi->flags & O_TRUNC)
		err = -phxfs_data_resize(inode, 0); /* atomic_o_trunc */
	if (!err && phxfs_dev_ranged(inode->dev)) {
		uint64_t size = phxfs_data_size(inode);
		bool writing = (fi->flags & O_ACCMODE) != O_RDONLY;

		err = -phxfs_range_reserve(
			inode, size, writing ? size + fs->headroom : size);
		if (!err)
			pass = phxfs_passthrough_open(fs, req, inode, fi);
	}
	pthread_rwlock_unlock(&inode->io_lock);
	if (err)
		return err;
	if (fi->flags & O_TRUNC) {
		pthread_mutex_lock(&fs->lock);
		phxfs_touch(&inode->mtime);
		inode->ctime = inode->mtime;
		pthread_mutex_unlock(&fs->lock);
	}
	if (!pass)
		open_flags(fs, fi);
	fi->fh = (uintptr_t)inode | pass;
	return 0;
}

static void phxfs_open(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct phxfs *fs = fs_of(req);
	struct phxfs_inode *inode;
	int err = 0;

	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, ino);
	if (!inode)
		err = ENOENT;
	else if (S_ISDIR(inode->mode))
		err = EISDIR;
	else
		inode->nopen++;
	pthread_mutex_unlock(&fs->lock);
	if (err)
		goto out_err;
	if (S_ISREG(inode->mode)) {
		err = open_file(fs, req, inode, fi);
		if (err) {
			pthread_mutex_lock(&fs->lock);
			phxfs_inode_unref(fs, inode, 0, 1);
			pthread_mutex_unlock(&fs->lock);
			goto out_err;
		}
	} else {
		fi->fh = (uintptr_t)inode;
		open_flags(fs, fi);
	}
	fuse_reply_open(req, fi);
	return;

out_err:
	fuse_reply_err(req, err);
}

static void phxfs_create(fuse_req_t req, fuse_ino_t parent, const char *name,
			 mode_t mode, struct fuse_file_info *fi)
{
	struct phxfs *fs = fs_of(req);
	struct phxfs_inode *inode;
	struct fuse_entry_param e;
	int err;

	err = make_node(req, parent, name, S_IFREG | (mode & 07777), NULL, true,
			&e);
	if (err) {
		fuse_reply_err(req, err);
		return;
	}
	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, e.ino);
	pthread_mutex_unlock(&fs->lock);
	err = open_file(fs, req, inode, fi);
	if (err) {
		/* The name stays, as after a failed open of an existing file. */
		pthread_mutex_lock(&fs->lock);
		phxfs_inode_unref(fs, inode, 1, 1);
		pthread_mutex_unlock(&fs->lock);
		fuse_reply_err(req, err);
		return;
	}
	fuse_reply_create(req, &e, fi);
}

static void phxfs_release(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct phxfs *fs = fs_of(req);
	struct phxfs_inode *inode = file_of(fi);

	if (S_ISREG(inode->mode) && phxfs_dev_ranged(inode->dev)) {
		pthread_rwlock_wrlock(&inode->io_lock);
		if (file_passthrough(fi))
			phxfs_passthrough_release(fs, req, inode);
		else
			phxfs_range_trim(inode);
		pthread_rwlock_unlock(&inode->io_lock);
	}
	pthread_mutex_lock(&fs->lock);
	phxfs_inode_unref(fs, inode, 0, 1);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_err(req, 0);
}

/* Read [@off, @off + @len) of a range file into @host. */
static int range_read(struct phxfs_inode *inode, void *host, uint64_t len,
		      uint64_t off)
{
	while (len) {
		ssize_t n = pread(inode->range_fd, host, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		host = (char *)host + n;
		len -= (uint64_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* Write to a range file; it grows up to its capacity. */
static int range_write(struct phxfs_inode *inode, const char *data,
		       uint64_t len, uint64_t off)
{
	while (len) {
		ssize_t n = pwrite(inode->range_fd, data, len, (off_t)off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		data += n;
		len -= (uint64_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

static void phxfs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	struct phxfs_inode *inode = file_of(fi);
	uint64_t fsize, n = 0;
	void *host = NULL, *pooled = NULL;
	int err = 0;

	pthread_rwlock_rdlock(&inode->io_lock);
	fsize = phxfs_data_size(inode);
	if (off >= 0 && (uint64_t)off < fsize)
		n = fsize - (uint64_t)off < size ? fsize - (uint64_t)off : size;
	if (n) {
		host = pooled = rbuf_get(fs_of(req), n);
		if (!host)
			host = thread_buf(size);
		if (!host)
			err = ENOMEM;
		else if (phxfs_ranged(inode))
			err = -range_read(inode, host, n, (uint64_t)off);
		else
			err = -phx_memcpy_from_buf(host, inode->buf,
						   (uint64_t)off, n);
	}
	pthread_rwlock_unlock(&inode->io_lock);
	atomic_fetch_add(&inode->dev->fuse_reads, 1);
	if (err) {
		fuse_reply_err(req, err);
	} else {
		atomic_fetch_add(&inode->dev->fuse_out, n);
		/* the reply copies the data into the kernel before returning */
		fuse_reply_buf(req, host, n);
	}
	if (pooled)
		rbuf_put(pooled);
}

/* Store @size bytes at @off, growing the file; io_lock not held. */
static int write_data(struct phxfs_inode *inode, const char *data,
		      uint64_t size, uint64_t off)
{
	uint64_t end = off + size, old;
	int ret;

	if (phxfs_dev_ranged(inode->dev)) {
		/* Only opens the kernel could not pass through come here. */
		pthread_rwlock_wrlock(&inode->io_lock);
		ret = phxfs_range_reserve(inode, end, end);
		if (!ret)
			ret = range_write(inode, data, size, off);
		pthread_rwlock_unlock(&inode->io_lock);
		return ret;
	}
	pthread_rwlock_rdlock(&inode->io_lock);
	if (end <= atomic_load(&inode->size)) {
		ret = phx_memcpy_to_buf(inode->buf, off, data, size);
		pthread_rwlock_unlock(&inode->io_lock);
		return ret;
	}
	pthread_rwlock_unlock(&inode->io_lock);

	/* Growing: alone on the buffer, and undone if the device is full. */
	pthread_rwlock_wrlock(&inode->io_lock);
	old = atomic_load(&inode->size);
	ret = end > old ? phxfs_data_resize(inode, end) : 0;
	if (!ret)
		ret = phx_memcpy_to_buf(inode->buf, off, data, size);
	if (ret && end > old)
		phxfs_data_resize(inode, old);
	pthread_rwlock_unlock(&inode->io_lock);
	return ret;
}

static void phxfs_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
			size_t size, off_t off, struct fuse_file_info *fi)
{
	struct phxfs *fs = fs_of(req);
	struct phxfs_inode *inode = file_of(fi);
	int err = 0;

	atomic_fetch_add(&inode->dev->fuse_writes, 1);
	if (off < 0 || (uint64_t)off > PHXFS_MAX_FILE ||
	    size > PHXFS_MAX_FILE - (uint64_t)off) {
		err = EFBIG;
		goto out_err;
	}
	if (size) {
		err = -write_data(inode, buf, size, (uint64_t)off);
		if (err)
			goto out_err;
	}
	atomic_store(&inode->path, PHX_PATH_MEMCPY);
	atomic_fetch_add(&inode->dev->fuse_in, size);
	pthread_mutex_lock(&fs->lock);
	phxfs_touch(&inode->mtime);
	inode->ctime = inode->mtime;
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_write(req, size);
	return;

out_err:
	fuse_reply_err(req, err);
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
	struct phxfs_inode *inode = file_of(fi);
	uint64_t end = (uint64_t)off + (uint64_t)len, old;
	int err = 0;

	if (mode) {
		err = EOPNOTSUPP;
		goto out;
	}
	if (off < 0 || len <= 0 || end > PHXFS_MAX_FILE) {
		err = off < 0 || len <= 0 ? EINVAL : EFBIG;
		goto out;
	}
	pthread_rwlock_wrlock(&inode->io_lock);
	old = phxfs_data_size(inode);
	if (end > old)
		err = -phxfs_data_resize(inode, end);
	/* A range file's memory is all there already. */
	if (!err && !phxfs_ranged(inode))
		err = -phx_buf_commit(inode->buf, (uint64_t)off, (uint64_t)len);
	if (err && end > old)
		phxfs_data_resize(inode, old);
	pthread_rwlock_unlock(&inode->io_lock);
out:
	fuse_reply_err(req, err);
}

static void phxfs_opendir(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct phxfs *fs = fs_of(req);
	struct phxfs_inode *dir;
	struct phxfs_dentry *d;
	struct dir_snap *s = NULL;
	size_t i = 0;
	int err;

	pthread_mutex_lock(&fs->lock);
	dir = dir_of(fs, ino, &err);
	if (err)
		goto out;
	s = calloc(1, sizeof(*s) + (dir->nchildren + 2) * sizeof(s->ents[0]));
	if (!s) {
		err = ENOMEM;
		goto out;
	}
	s->ents[0].ino = dir->ino;
	s->ents[0].name = strdup(".");
	s->ents[1].ino = dir->parent->ino;
	s->ents[1].name = strdup("..");
	s->ents[0].mode = s->ents[1].mode = S_IFDIR;
	for (i = 2, d = dir->children; d; d = d->sib_next, i++) {
		s->ents[i].ino = d->inode->ino;
		s->ents[i].mode = d->inode->mode;
		s->ents[i].name = strdup(d->name);
	}
	s->n = i;
	for (i = 0; i < s->n; i++)
		if (!s->ents[i].name)
			err = ENOMEM;
out:
	pthread_mutex_unlock(&fs->lock);
	if (err) {
		for (i = 0; s && i < s->n; i++)
			free(s->ents[i].name);
		free(s);
		fuse_reply_err(req, err);
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
	size_t i;

	for (i = 0; i < s->n; i++)
		free(s->ents[i].name);
	free(s);
	fuse_reply_err(req, 0);
}

static void phxfs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct phxfs *fs = fs_of(req);
	struct phxfs_inode *inode;
	struct phxfs_dev *dev = NULL;
	struct statvfs st;

	pthread_mutex_lock(&fs->lock);
	inode = phxfs_inode_get(fs, ino);
	if (inode)
		dev = inode->dev;
	phxfs_dev_statfs(fs, dev, &st);
	pthread_mutex_unlock(&fs->lock);
	fuse_reply_statfs(req, &st);
}

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
	struct phxfs *fs = fs_of(req);
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
	struct phxfs *fs = fs_of(req);
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

const struct fuse_lowlevel_ops phxfs_ops = {
	.init = phxfs_init,
	.lookup = phxfs_lookup,
	.forget = phxfs_forget,
	.forget_multi = phxfs_forget_multi,
	.getattr = phxfs_getattr,
	.setattr = phxfs_setattr,
	.readlink = phxfs_readlink,
	.mknod = phxfs_mknod,
	.mkdir = phxfs_mkdir,
	.unlink = phxfs_unlink,
	.rmdir = phxfs_rmdir,
	.symlink = phxfs_symlink,
	.rename = phxfs_rename,
	.link = phxfs_link,
	.open = phxfs_open,
	.read = phxfs_read,
	.write = phxfs_write,
	.flush = phxfs_flush,
	.release = phxfs_release,
	.fsync = phxfs_fsync,
	.opendir = phxfs_opendir,
	.readdir = phxfs_readdir,
	.releasedir = phxfs_releasedir,
	.statfs = phxfs_statfs,
	.setxattr = phxfs_setxattr,
	.getxattr = phxfs_getxattr,
	.listxattr = phxfs_listxattr,
	.removexattr = phxfs_removexattr,
	.create = phxfs_create,
	.fallocate = phxfs_fallocate,
};
