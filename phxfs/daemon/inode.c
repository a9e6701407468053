/* SPDX-License-Identifier: MIT */
/* inode.c - phxfs's inode table and directory entries (all under fs->lock). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "phxfs.h"

#define INODE_BUCKETS (1u << 16)
#define DENTRY_BUCKETS (1u << 16)

static unsigned int ino_bucket(fuse_ino_t ino)
{
	return (unsigned int)((ino * 0x9E3779B97F4A7C15ULL) >> 48) &
	       (INODE_BUCKETS - 1);
}

/* FNV-1a over the parent's number and the name. */
static unsigned int dentry_bucket(fuse_ino_t parent, const char *name)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ parent;

	while (*name) {
		h ^= (unsigned char)*name++;
		h *= 0x100000001b3ULL;
	}
	return (unsigned int)(h ^ (h >> 32)) & (DENTRY_BUCKETS - 1);
}

void phxfs_touch(struct timespec *ts)
{
	clock_gettime(CLOCK_REALTIME, ts);
}

/* Is the caller of @req in group @gid (primary or supplementary)? */
static bool caller_in_group(const void *req, gid_t gid)
{
	gid_t groups[64];
	int i, n;

	if (fuse_req_ctx((fuse_req_t)req)->gid == gid)
		return true;
	n = fuse_req_getgroups((fuse_req_t)req, 64, groups);
	for (i = 0; i < n && i < 64; i++)
		if (groups[i] == gid)
			return true;
	return false;
}

bool phxfs_kill_priv_as(struct phxfs *fs, struct phxfs_inode *inode, uid_t uid,
			bool (*in_group)(const void *, gid_t), const void *who)
{
	mode_t mode = inode->mode;
	bool changed = !phxfs_xattr_remove(fs, inode, "security.capability");

	if (!S_ISREG(mode) || !(mode & (S_ISUID | S_ISGID)) || !uid)
		return changed;
	mode &= ~(mode_t)S_ISUID;
	if ((mode & S_ISGID) &&
	    ((mode & S_IXGRP) || !in_group(who, inode->gid)))
		mode &= ~(mode_t)S_ISGID;
	if (mode != inode->mode) {
		inode->mode = mode;
		phxfs_touch(&inode->ctime);
		changed = true;
	}
	return changed;
}

bool phxfs_kill_priv(fuse_req_t req, struct phxfs_inode *inode)
{
	return phxfs_kill_priv_as(phxfs_fs(req), inode, fuse_req_ctx(req)->uid,
				  caller_in_group, req);
}

void phxfs_attr_changed(struct phxfs *fs, struct phxfs_inode *inode)
{
	/* attributes only (offset < 0): no page cache, no lock in the kernel */
	fuse_lowlevel_notify_inval_inode(fs->se, inode->ino, -1, 0);
}

int phxfs_table_init(struct phxfs *fs)
{
	fs->inodes = calloc(INODE_BUCKETS, sizeof(*fs->inodes));
	fs->dentries = calloc(DENTRY_BUCKETS, sizeof(*fs->dentries));
	if (!fs->inodes || !fs->dentries)
		return -ENOMEM;
	pthread_mutex_init(&fs->lock, NULL);
	fs->next_ino = FUSE_ROOT_ID;
	fs->root = phxfs_inode_new(fs, NULL, S_IFDIR | 0755, 0, 0);
	if (!fs->root)
		return -ENOMEM;
	fs->root->parent = fs->root;
	fs->root->nlookup = 1; /* never forgotten */
	return 0;
}

static void inode_free(struct phxfs *fs, struct phxfs_inode *inode)
{
	struct phxfs_inode **p = &fs->inodes[ino_bucket(inode->ino)];

	while (*p != inode)
		p = &(*p)->hash_next;
	*p = inode->hash_next;
	phxfs_data_free(inode);
	pthread_rwlock_destroy(&inode->io_lock);
	free(inode->symlink);
	phxfs_xattr_free_all(fs, inode);
	if (S_ISREG(inode->mode))
		fs->nfiles--;
	free(inode);
	fs->ninodes--;
}

void phxfs_table_destroy(struct phxfs *fs)
{
	unsigned int i;

	for (i = 0; fs->dentries && i < DENTRY_BUCKETS; i++) {
		while (fs->dentries[i]) {
			struct phxfs_dentry *d = fs->dentries[i];

			fs->dentries[i] = d->hash_next;
			fs->nentries--;
			free(d);
		}
	}
	for (i = 0; fs->inodes && i < INODE_BUCKETS; i++)
		while (fs->inodes[i])
			inode_free(fs, fs->inodes[i]);
	free(fs->inodes);
	free(fs->dentries);
}

struct phxfs_inode *phxfs_inode_get(struct phxfs *fs, fuse_ino_t ino)
{
	struct phxfs_inode *inode = fs->inodes[ino_bucket(ino)];

	while (inode && inode->ino != ino)
		inode = inode->hash_next;
	return inode;
}

struct phxfs_inode *phxfs_inode_new(struct phxfs *fs, struct phxfs_dev *dev,
				    mode_t mode, uid_t uid, gid_t gid)
{
	struct phxfs_inode *inode;
	unsigned int b;

	/* nr_inodes, as on tmpfs: ENOSPC, not the daemon's memory */
	if (fs->nr_inodes && fs->ninodes >= fs->nr_inodes) {
		errno = ENOSPC;
		return NULL;
	}
	inode = calloc(1, sizeof(*inode));
	if (!inode) {
		errno = ENOMEM;
		return NULL;
	}
	inode->ino = fs->next_ino++;
	inode->mode = mode;
	inode->uid = uid;
	inode->gid = gid;
	inode->nlink = S_ISDIR(mode) ? 2 : 1;
	inode->dev = dev;
	inode->range_fd = -1;
	pthread_rwlock_init(&inode->io_lock, NULL);
	phxfs_touch(&inode->mtime);
	inode->atime = inode->ctime = inode->mtime;
	b = ino_bucket(inode->ino);
	inode->hash_next = fs->inodes[b];
	fs->inodes[b] = inode;
	fs->ninodes++;
	if (S_ISREG(mode))
		fs->nfiles++;
	return inode;
}

struct phxfs_dentry *
phxfs_dentry_find(struct phxfs *fs, struct phxfs_inode *dir, const char *name)
{
	struct phxfs_dentry *d = fs->dentries[dentry_bucket(dir->ino, name)];

	while (d && (d->parent != dir || strcmp(d->name, name)))
		d = d->hash_next;
	return d;
}

/* An entry named @name, not in any directory yet; NULL when out of memory. */
struct phxfs_dentry *phxfs_dentry_new(const char *name)
{
	size_t len = strlen(name);
	struct phxfs_dentry *d = malloc(sizeof(*d) + len + 1);

	if (d)
		memcpy(d->name, name, len + 1);
	return d;
}

/* Put @d, from phxfs_dentry_new(), in @dir for @inode; cannot fail. */
void phxfs_dentry_link(struct phxfs *fs, struct phxfs_inode *dir,
		       struct phxfs_dentry *d, struct phxfs_inode *inode)
{
	unsigned int b = dentry_bucket(dir->ino, d->name);

	fs->nentries++;
	d->parent = dir;
	d->inode = inode;
	d->hash_next = fs->dentries[b];
	fs->dentries[b] = d;
	d->sib_prev = NULL;
	d->sib_next = dir->children;
	if (dir->children)
		dir->children->sib_prev = d;
	dir->children = d;
	dir->nchildren++;
	if (S_ISDIR(inode->mode)) {
		inode->parent = dir;
		dir->nlink++;
	}
	phxfs_touch(&dir->mtime);
	dir->ctime = dir->mtime;
}

int phxfs_dentry_add(struct phxfs *fs, struct phxfs_inode *dir,
		     const char *name, struct phxfs_inode *inode)
{
	struct phxfs_dentry *d;

	/* a hard link costs as much as an inode, as on tmpfs */
	if (fs->nr_inodes && fs->nentries >= fs->nr_inodes)
		return -ENOSPC;
	d = phxfs_dentry_new(name);
	if (!d)
		return -ENOMEM;
	phxfs_dentry_link(fs, dir, d, inode);
	return 0;
}

/* Unlink @d from its directory; the inode keeps its link count. */
void phxfs_dentry_remove(struct phxfs *fs, struct phxfs_dentry *d)
{
	struct phxfs_inode *dir = d->parent;
	struct phxfs_dentry **p =
		&fs->dentries[dentry_bucket(dir->ino, d->name)];

	while (*p != d)
		p = &(*p)->hash_next;
	*p = d->hash_next;
	if (d->sib_prev)
		d->sib_prev->sib_next = d->sib_next;
	else
		dir->children = d->sib_next;
	if (d->sib_next)
		d->sib_next->sib_prev = d->sib_prev;
	dir->nchildren--;
	fs->nentries--;
	if (S_ISDIR(d->inode->mode))
		dir->nlink--;
	phxfs_touch(&dir->mtime);
	dir->ctime = dir->mtime;
	fs->dentry_gen++; /* a walk that let go of fs->lock looks again */
	free(d);
}

void phxfs_inode_unref(struct phxfs *fs, struct phxfs_inode *inode,
		       uint64_t nlookup, unsigned int nopen)
{
	inode->nlookup -= nlookup;
	inode->nopen -= nopen;
	if (inode->nlink || inode->nopen)
		return;
	/* Unlinked and closed: the memory goes now, the number on forget. */
	phxfs_data_free(inode);
	if (!inode->nlookup)
		inode_free(fs, inode);
}

void phxfs_fill_stat(struct phxfs *fs, struct phxfs_inode *inode,
		     struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = inode->ino;
	st->st_mode = inode->mode;
	st->st_nlink = inode->nlink;
	st->st_uid = inode->uid;
	st->st_gid = inode->gid;
	st->st_atim = inode->atime;
	st->st_mtim = inode->mtime;
	st->st_ctim = inode->ctime;
	st->st_rdev = inode->rdev;
	st->st_blksize = (blksize_t)fs->blksize;
	if (S_ISREG(inode->mode)) {
		st->st_size = (off_t)phxfs_data_size(inode);
		st->st_blocks = (blkcnt_t)(phxfs_data_held(inode) / 512);
	} else if (S_ISLNK(inode->mode)) {
		st->st_size = (off_t)strlen(inode->symlink);
	} else if (S_ISDIR(inode->mode)) {
		st->st_size = 4096;
	}
}
