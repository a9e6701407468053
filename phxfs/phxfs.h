/* SPDX-License-Identifier: MIT */
/*
 * phxfs.h - what the files of the phxfs daemon share: the file system
 * object, inodes and directory entries, the device glue and the control
 * socket.
 *
 * Locking, outermost first:
 *   fs->lock        the namespace: inode table, directory entries, every
 *                   inode's metadata and reference counts;
 *   inode->io_lock  the inode's device buffer and size: data copies hold it
 *                   shared, anything that resizes or replaces the buffer
 *                   holds it exclusive.  Taken after fs->lock, never the
 *                   other way round: drop io_lock before taking fs->lock.
 */
#ifndef PHXFS_H
#define PHXFS_H

#define FUSE_USE_VERSION 314

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "phoenix.h"

#define PHXFS_MAX_DEVICES 16
#define PHXFS_NAME_MAX 255
/* Largest file: beyond it a write or truncate is EFBIG (as on ext4). */
#define PHXFS_MAX_FILE (1ULL << 44)
/* Names starting with this are kept for the file system itself. */
#define PHXFS_RESERVED_PREFIX ".phx."

struct phxfs_inode;

/* One device, shown as a top-level directory. */
struct phxfs_dev {
	struct phx_device *dev;
	char name[16]; /* "gpu0", "sim0": the directory name */
	enum phx_device_kind kind;
	uint64_t reserve; /* bytes kept free for other users */
	uint64_t limit; /* most bytes phxfs may hold on it */
	struct phxfs_inode *root; /* its directory */
	atomic_uint files; /* regular files that hold a buffer */
	atomic_uint_fast64_t fuse_in, fuse_out; /* bytes through the mount */
};

struct phxfs_opts {
	char *reserve; /* -o reserve=SIZE */
	char *size; /* -o size=SIZE: cap per device */
	char *kind; /* -o kind=cuda|sim|kmod */
	char *blksize; /* -o blksize=SIZE: st_blksize of files */
	char *max_write; /* -o max_write=SIZE: largest FUSE write */
	unsigned int threads; /* -o threads=N: FUSE worker threads */
	int writeback; /* -o writeback: page cache instead of direct I/O */
};

struct phxfs {
	struct fuse_session *se;
	struct phxfs_opts opts;
	uint64_t blksize;
	uint64_t max_write;
	uint64_t reserve;
	uint64_t size;
	char mountpoint[4096];
	char sock_path[108]; /* control socket, see ctl.c */
	int sock_fd;

	struct phxfs_dev devs[PHXFS_MAX_DEVICES];
	unsigned int ndevs;

	pthread_mutex_t lock; /* the namespace, see above */
	struct phxfs_inode *root;
	struct phxfs_inode **inodes; /* hash by ino; lock */
	struct phxfs_dentry **dentries; /* hash by (parent, name); lock */
	uint64_t next_ino; /* lock */
	uint64_t ninodes; /* lock */
};

struct phxfs_inode {
	fuse_ino_t ino;
	struct phxfs_inode *hash_next; /* lock */

	/* metadata, protected by fs->lock */
	mode_t mode;
	uid_t uid;
	gid_t gid;
	unsigned int nlink;
	struct timespec atime, mtime, ctime;
	uint64_t nlookup; /* kernel references (lookup - forget) */
	unsigned int nopen; /* open handles and control-socket users */
	char *symlink; /* target of a symlink */
	struct phxfs_dentry *children; /* directory: its entries */
	unsigned int nchildren; /* directory: entries in it */
	struct phxfs_inode *parent; /* directory: where it lives */

	/* data, protected by io_lock */
	pthread_rwlock_t io_lock;
	struct phxfs_dev *dev; /* device it lives on (io_lock for files) */
	struct phx_buf *buf; /* NULL until the first byte is stored */
	_Atomic uint64_t size; /* written with io_lock held exclusive */
	_Atomic int path; /* enum phx_path of the last write */
};

/* A name in a directory. */
struct phxfs_dentry {
	struct phxfs_inode *parent;
	struct phxfs_inode *inode;
	struct phxfs_dentry *hash_next; /* fs->lock */
	struct phxfs_dentry *sib_next, *sib_prev; /* fs->lock */
	char name[];
};

/* ---- inode.c: the inode table --------------------------------------- */
int phxfs_table_init(struct phxfs *fs);
void phxfs_table_destroy(struct phxfs *fs);
struct phxfs_inode *phxfs_inode_get(struct phxfs *fs, fuse_ino_t ino);
struct phxfs_inode *phxfs_inode_new(struct phxfs *fs, struct phxfs_dev *dev,
				    mode_t mode, uid_t uid, gid_t gid);
struct phxfs_dentry *
phxfs_dentry_find(struct phxfs *fs, struct phxfs_inode *dir, const char *name);
int phxfs_dentry_add(struct phxfs *fs, struct phxfs_inode *dir,
		     const char *name, struct phxfs_inode *inode);
void phxfs_dentry_remove(struct phxfs *fs, struct phxfs_dentry *d);
/* Drop references; frees memory and the inode when nothing holds them. */
void phxfs_inode_unref(struct phxfs *fs, struct phxfs_inode *inode,
		       uint64_t nlookup, unsigned int nopen);
void phxfs_fill_stat(struct phxfs *fs, struct phxfs_inode *inode,
		     struct stat *st);
void phxfs_touch(struct timespec *ts);

/* ---- device.c: the device layer glue -------------------------------- */
int phxfs_devices_open(struct phxfs *fs);
void phxfs_devices_close(struct phxfs *fs);
void phxfs_dev_statfs(struct phxfs *fs, struct phxfs_dev *dev,
		      struct statvfs *st);
/* Resize @inode's buffer to @size, allocating it if needed; io_lock held
 * exclusive. */
int phxfs_data_resize(struct phxfs_inode *inode, uint64_t size);
/* Give @inode a (possibly empty) buffer; io_lock held exclusive. */
int phxfs_data_ensure(struct phxfs_inode *inode);
/* Move @inode's contents to device @to (device-to-device copy). */
int phxfs_data_move(struct phxfs_inode *inode, struct phxfs_dev *to);
/* Free @inode's device memory. */
void phxfs_data_free(struct phxfs_inode *inode);

/* ---- ops.c: the FUSE operations ------------------------------------- */
extern const struct fuse_lowlevel_ops phxfs_ops;

/* ---- ctl.c: the control socket -------------------------------------- */
int phxfs_ctl_start(struct phxfs *fs);
void phxfs_ctl_stop(struct phxfs *fs);

#endif /* PHXFS_H */
