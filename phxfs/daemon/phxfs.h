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

/* The build passes 317 when it links libfuse 3.17 (FUSE passthrough). */
#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 314
#endif

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "phoenix.h"

#define PHXFS_MAX_DEVICES 16
#define PHXFS_NAME_MAX 255
/*
 * Largest file: a truncate or fallocate beyond it, or a write starting at
 * or past it, is EFBIG; a write crossing it is short (as on ext4).
 */
#define PHXFS_MAX_FILE (1ULL << 44)
/* Longest reason phxfs gives for a feature being off (status). */
#define PHXFS_WHY_MAX 160
/* Names starting with this are kept for the file system itself. */
#define PHXFS_RESERVED_PREFIX ".phx."

/* libfuse 3.17 has fuse_passthrough_open() and fi->backing_id. */
#if FUSE_USE_VERSION >= 317 && FUSE_VERSION >= FUSE_MAKE_VERSION(3, 17)
#define PHXFS_HAVE_PASSTHROUGH 1
#else
#define PHXFS_HAVE_PASSTHROUGH 0
#endif

/*
 * The largest FUSE request (read or write) this libfuse takes: 3.14 reads
 * /dev/fuse into a fixed buffer of 1 MiB and a header; 3.17 sizes its
 * buffer from max_write.  The kernel's own cap is fs.fuse.max_pages_limit
 * pages (256 unless raised).
 */
#if FUSE_VERSION >= FUSE_MAKE_VERSION(3, 17)
#define PHXFS_LIBFUSE_MAX_REQUEST (1ULL << 30)
#else
#define PHXFS_LIBFUSE_MAX_REQUEST (1ULL << 20)
#endif
/* Default request size where both allow it. */
#define PHXFS_DEFAULT_REQUEST (16ULL << 20)

/* Ask for (@on) or decline a capability in FUSE init; libfuse 3.17 fails
 * the session when both conn->want and its 64-bit successor change. */
static inline void phxfs_want(struct fuse_conn_info *conn, uint64_t flag,
			      bool on)
{
#if FUSE_USE_VERSION >= 317 && FUSE_VERSION >= FUSE_MAKE_VERSION(3, 17)
	if (on)
		fuse_set_feature_flag(conn, flag);
	else
		fuse_unset_feature_flag(conn, flag);
#else
	if (on)
		conn->want |= (unsigned int)flag;
	else
		conn->want &= ~(unsigned int)flag;
#endif
}

/* user.phx.path of a file the kernel serves through passthrough; the
 * other values are enum phx_path. */
#define PHXFS_PATH_PASSTHROUGH 100

struct phxfs_inode;

/* One device, shown as a top-level directory. */
struct phxfs_dev {
	struct phx_device *dev;
	char name[16]; /* "gpu0", "sim0": the directory name */
	enum phx_device_kind kind;
	uint64_t reserve; /* bytes kept free for other users */
	uint64_t limit; /* most bytes phxfs may hold on it */
	uint64_t root_reserve; /* of @limit, what only root may take */
	struct phxfs_inode *root; /* its directory */
	atomic_uint files; /* regular files that hold a buffer */
	atomic_uint_fast64_t fuse_in, fuse_out; /* bytes through the mount */
	atomic_uint_fast64_t fuse_writes, fuse_reads; /* requests served */
	/* reads served from a read-ahead, read-aheads a read threw away */
	atomic_uint_fast64_t ra_hits, ra_dropped;
	/* its files are libphoenix backing files that the kernel serves
	 * through passthrough (see backing.c) */
	bool backing;
};

struct phxfs_opts {
	char *reserve; /* -o reserve=SIZE */
	char *size; /* -o size=SIZE: cap per device */
	char *kind; /* -o kind=cuda|sim|kmod */
	char *blksize; /* -o blksize=SIZE: st_blksize of files */
	char *max_write; /* -o max_write=SIZE: largest FUSE request */
	unsigned int threads; /* -o threads=N: FUSE worker threads */
	int writeback; /* -o writeback: page cache instead of direct I/O */
	char *headroom; /* -o headroom=SIZE: growth room of passthrough files */
	int no_readahead; /* -o no_readahead: serve each read on its own */
	int io_uring; /* -o io_uring: requests over io_uring where offered */
	char *root_reserve; /* -o root_reserve=SIZE|N%: root's share */
	char *xattr_size; /* -o xattr_size=SIZE: stored xattrs, all files */
	char *xattr_file; /* -o xattr_file=SIZE: stored xattrs, one file */
	char *nr_inodes; /* -o nr_inodes=N: inodes and links */
	unsigned int ctl_timeout; /* -o ctl_timeout=S: control socket */
	unsigned int ctl_conns; /* -o ctl_conns=N: connections in all */
	unsigned int ctl_conns_uid; /* -o ctl_conns_uid=N: of one user */
	int nonempty; /* -o nonempty: phx mount's, accepted and ignored */
};

/* Defaults of the limits above. */
#define PHXFS_ROOT_RESERVE_PCT 5
#define PHXFS_XATTR_SIZE (16ULL << 20)
#define PHXFS_XATTR_FILE (256ULL << 10)
#define PHXFS_NR_INODES (1ULL << 20)
#define PHXFS_CTL_TIMEOUT 10
#define PHXFS_CTL_CONNS 128
#define PHXFS_CTL_CONNS_UID 16
/* the most the options may ask for: an hour, a thread per connection */
#define PHXFS_CTL_TIMEOUT_MAX 3600
#define PHXFS_CTL_CONNS_MAX 4096

struct phxfs {
	struct fuse_session *se;
	struct phxfs_opts opts;
	uint64_t blksize;
	uint64_t max_write;
	uint64_t reserve;
	uint64_t size;
	uint64_t headroom;
	/* root's share of each device: a percentage of it, or bytes */
	unsigned int root_reserve_pct;
	uint64_t root_reserve;
	/* Passthrough: on once the kernel agreed in init, else why not. */
	bool passthrough;
	char passthrough_why[PHXFS_WHY_MAX];
	/* FUSE over io_uring: asked for (loop.c), on once init agreed. */
	bool uring;
	char uring_why[PHXFS_WHY_MAX];
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
	uint64_t nfiles; /* regular files among them; lock */
	uint64_t dentry_gen; /* bumped when an entry is freed; lock */
	/* names in directories, inodes without one; capped by nr_inodes */
	uint64_t nentries; /* lock */
	uint64_t nr_inodes;
	uint64_t xattr_bytes; /* stored xattrs' names and values; lock */
	uint64_t xattr_size, xattr_file;

	/* the control socket (ctlsock.c) */
	pthread_mutex_t ctl_lock;
	unsigned int ctl_nconns; /* ctl_lock */
	struct phxfs_ctl_user *ctl_users; /* open connections per uid */
	int ctl_spare_fd; /* given up to refuse a connection at EMFILE */
	bool ctl_stopping;
	dev_t st_dev; /* of the mount, learnt from the first request */
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
	dev_t rdev; /* device number of a device node */
	struct phxfs_xattr *xattrs; /* stored extended attributes */
	struct phxfs_dentry *children; /* directory: its entries */
	unsigned int nchildren; /* directory: entries in it */
	struct phxfs_inode *parent; /* directory: where it lives */

	/* data, protected by io_lock */
	pthread_rwlock_t io_lock;
	struct phxfs_dev *dev; /* device it lives on (io_lock for files) */
	struct phx_buf *buf; /* NULL until the first byte is stored */
	_Atomic uint64_t size; /* written with io_lock held exclusive */
	_Atomic int path; /* enum phx_path of the last write */
	/*
	 * Bumped once a change of the data or size is complete, before it
	 * is answered (phxfs_data_changed()): a read-ahead made before is
	 * stale.  @shared: another process maps @buf (ctl.c OPEN) and may
	 * write it unseen, so nothing is read ahead any more.
	 */
	atomic_uint_fast64_t data_gen;
	atomic_bool shared;
	atomic_uint_fast64_t ra_hits, ra_dropped; /* as the device's */

	/*
	 * Instead of @buf, on a device with backing files: @backing, of
	 * @range_cap bytes, that the kernel reads and writes itself (its
	 * size is the file's).  @backing_id is its passthrough registration
	 * while @npass opens use it.  All under io_lock; @range_fd is its
	 * descriptor (phx_backing_fd()), whose number never changes while
	 * set and which is freed only with fs->lock held too, so fstat()
	 * under either lock is safe.
	 */
	struct phx_backing *backing;
	int range_fd;
	uint64_t range_cap;
	int backing_id;
	unsigned int npass;
};

/* A name in a directory. */
struct phxfs_dentry {
	struct phxfs_inode *parent;
	struct phxfs_inode *inode;
	struct phxfs_dentry *hash_next; /* fs->lock */
	struct phxfs_dentry *sib_next, *sib_prev; /* fs->lock */
	char name[];
};

enum phxfs_ra_state {
	PHXFS_RA_NONE, /* nothing read ahead */
	PHXFS_RA_QUEUED, /* waits for a worker */
	PHXFS_RA_RUNNING, /* being copied */
	PHXFS_RA_DONE, /* copied, or failed (@err) */
};

/*
 * The read-ahead of one open file: [@off, @off + @want) asked for, copied
 * from the device into @host (pinned, from @dev's pool) while the read
 * before it is answered; @len bytes of it exist.  @on is set at open and
 * never changes; the rest is protected by the read-ahead lock
 * (readahead.c), except that whoever moved it to RUNNING fills @len and
 * @err without it.
 */
struct phxfs_ra {
	bool on;
	enum phxfs_ra_state state;
	uint64_t next; /* where a sequential read starts: the last one's end */
	uint64_t off, want, len;
	uint64_t gen; /* the inode's data_gen when it was asked for */
	int err;
	void *host;
	struct phxfs_dev *dev;
	struct phxfs_handle *queue_next;
	pthread_cond_t done; /* signalled when it leaves RUNNING */
};

struct phxfs_handle {
	struct phxfs_inode *inode; /* holds an open reference (nopen) */
	uid_t uid; /* who opened it: page-cache flushes carry no caller */
	bool passthrough; /* the kernel serves it (backing.c) */
	struct phxfs_ra ra;
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
struct phxfs_dentry *phxfs_dentry_new(const char *name);
void phxfs_dentry_link(struct phxfs *fs, struct phxfs_inode *dir,
		       struct phxfs_dentry *d, struct phxfs_inode *inode);
void phxfs_dentry_remove(struct phxfs *fs, struct phxfs_dentry *d);
/* Drop references; frees memory and the inode when nothing holds them. */
void phxfs_inode_unref(struct phxfs *fs, struct phxfs_inode *inode,
		       uint64_t nlookup, unsigned int nopen);
void phxfs_fill_stat(struct phxfs *fs, struct phxfs_inode *inode,
		     struct stat *st);
void phxfs_touch(struct timespec *ts);
/*
 * What a write or truncation by the caller of @req takes from @inode, as
 * the kernel does on local file systems: SUID, SGID where it marks group
 * execution (or the caller is outside the group), both only for callers
 * other than root, and file capabilities for everyone.  fs->lock held;
 * true if anything changed (the kernel's cached attributes are stale).
 */
bool phxfs_kill_priv(fuse_req_t req, struct phxfs_inode *inode);
/*
 * The same for a write by user @uid that is not a FUSE request (a copy
 * over the control socket): @in_group(@who, gid) says whether the writer
 * is in group gid.  fs->lock held.
 */
bool phxfs_kill_priv_as(struct phxfs *fs, struct phxfs_inode *inode, uid_t uid,
			bool (*in_group)(const void *, gid_t), const void *who);
/* Tell the kernel that @inode's cached attributes are stale. */
void phxfs_attr_changed(struct phxfs *fs, struct phxfs_inode *inode);

/* @inode's data or size changed, and the change is complete. */
static inline void phxfs_data_changed(struct phxfs_inode *inode)
{
	atomic_fetch_add(&inode->data_gen, 1);
}

/* ---- device.c: the devices, each a top-level directory ------------- */
int phxfs_devices_open(struct phxfs *fs);
void phxfs_devices_close(struct phxfs *fs);
void phxfs_dev_statfs(struct phxfs *fs, struct phxfs_dev *dev,
		      struct statvfs *st);

/* ---- data.c: a regular file's bytes --------------------------------- */
/*
 * Resize @inode's buffer to @size, allocating it if needed; io_lock held
 * exclusive.  This, phxfs_data_move() and phxfs_data_free() mark the
 * data changed (phxfs_data_changed()) themselves.
 */
int phxfs_data_resize(struct phxfs_inode *inode, uint64_t size);
/* Give @inode a (possibly empty) buffer; io_lock held exclusive. */
int phxfs_data_ensure(struct phxfs_inode *inode);
/*
 * Move @inode's contents to device @to (device-to-device copy of its data,
 * holes kept), for @uid: charged there as a write of what the file holds,
 * -ENOSPC (the file left where it was) where that dips into @to's root
 * reserve and @uid is not root, or the device is full.
 */
int phxfs_data_move(struct phxfs_inode *inode, struct phxfs_dev *to, uid_t uid);
/* Free @inode's device memory. */
void phxfs_data_free(struct phxfs_inode *inode);

/* Size of a regular file (io_lock or fs->lock held: a range file's
 * descriptor is closed only under both). */
uint64_t phxfs_data_size(struct phxfs_inode *inode);
/* Bytes of device memory the file holds; as phxfs_data_size(). */
uint64_t phxfs_data_held(struct phxfs_inode *inode);
/* The first run of data at or after @off (phx_buf_next_data()); -ENXIO. */
int phxfs_data_next(struct phxfs_inode *inode, uint64_t off, uint64_t *data_off,
		    uint64_t *data_len);

/* ---- loop.c: how requests arrive and which worker takes them ---------- */
/* Read requests through phxfs's own I/O; after fuse_session_mount(). */
void phxfs_loop_setup(struct phxfs *fs);
/* Before fuse_session_new(): ask libfuse for io_uring where offered. */
int phxfs_uring_args(struct phxfs *fs, struct fuse_args *args);
/* In FUSE init: whether the kernel agreed. */
void phxfs_uring_init(struct phxfs *fs, struct fuse_conn_info *conn);
/*
 * Where @req's data arrives and its reply is built when it came over
 * io_uring, pinned on every device (so copies go straight between it and
 * device memory); NULL for /dev/fuse requests, or past the pinning cap.
 * Its size in *@size unless @size is NULL.
 */
void *phxfs_req_payload(fuse_req_t req, size_t *size);

/* ---- backing.c: passthrough backing files from phx.ko ---------------- */
/* Decide whether passthrough can be used; after phxfs_devices_open(). */
void phxfs_backing_setup(struct phxfs *fs);
/* The kernel's answer in FUSE init; logs why not, once. */
void phxfs_backing_init(struct phxfs *fs, struct fuse_conn_info *conn);
void phxfs_backing_off(struct phxfs *fs, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void phxfs_backing_close(struct phxfs *fs);
/* Does @inode keep its bytes in a range file?  io_lock held. */
static inline bool phxfs_ranged(const struct phxfs_inode *inode)
{
	return inode->range_fd >= 0;
}
/* Would @inode on @dev keep its bytes in a range file? */
static inline bool phxfs_dev_ranged(const struct phxfs_dev *dev)
{
	return dev && dev->backing;
}
/*
 * Make @inode's range hold at least @need bytes (-EFBIG where it would
 * have to move but open files or mappings hold it), and @want where it
 * can; io_lock exclusive.
 */
int phxfs_range_reserve(struct phxfs_inode *inode, uint64_t need,
			uint64_t want);
int phxfs_range_set_size(struct phxfs_inode *inode, uint64_t size);
/* Give the capacity past the size back (no open uses passthrough). */
void phxfs_range_trim(struct phxfs_inode *inode);
void phxfs_range_free(struct phxfs_inode *inode);
/* Serve @fi from the range in the kernel; false: the daemon serves it. */
bool phxfs_passthrough_open(struct phxfs *fs, fuse_req_t req,
			    struct phxfs_inode *inode,
			    struct fuse_file_info *fi);
void phxfs_passthrough_release(struct phxfs *fs, fuse_req_t req,
			       struct phxfs_inode *inode);
const char *phxfs_path_name(int path);

/* ---- xattr_store.c: stored extended attributes (fs->lock held) ------ */
/* Store @name = @value (XATTR_CREATE / XATTR_REPLACE in @flags). */
int phxfs_xattr_set(struct phxfs *fs, struct phxfs_inode *inode,
		    const char *name, const char *value, size_t len, int flags);
int phxfs_xattr_remove(struct phxfs *fs, struct phxfs_inode *inode,
		       const char *name);
void phxfs_xattr_free_all(struct phxfs *fs, struct phxfs_inode *inode);
/* The value of @name and its length in *@len, or NULL (no such name). */
const void *phxfs_xattr_value(const struct phxfs_inode *inode, const char *name,
			      size_t *len);
/* Bytes the names and values of @inode's attributes take. */
size_t phxfs_xattr_stored(const struct phxfs_inode *inode);
/* Write @inode's names, each NUL-terminated, to @out (room for
 * phxfs_xattr_stored() bytes); returns the bytes written. */
size_t phxfs_xattr_names(const struct phxfs_inode *inode, char *out);

/* ---- ops.c, dir.c, attr.c, file.c, xattr.c: the FUSE operations ---- */
/* How long the kernel may cache attributes and names (seconds). */
#define PHXFS_ATTR_TIMEOUT 1.0
/* Fill @o with every handler; sets up what they share. */
void phxfs_ops_init(struct phxfs *fs, struct fuse_lowlevel_ops *o);
void phxfs_dir_ops(struct fuse_lowlevel_ops *o);
void phxfs_attr_ops(struct fuse_lowlevel_ops *o);
void phxfs_file_ops(struct phxfs *fs, struct fuse_lowlevel_ops *o);
void phxfs_xattr_ops(struct fuse_lowlevel_ops *o);

static inline struct phxfs *phxfs_fs(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* An open file (fi->fh), made in open and create, freed in release. */
static inline struct phxfs_handle *phxfs_handle(struct fuse_file_info *fi)
{
	return (struct phxfs_handle *)(uintptr_t)fi->fh;
}

static inline struct phxfs_inode *phxfs_file(struct fuse_file_info *fi)
{
	return phxfs_handle(fi)->inode;
}

/*
 * Set up @fi for regular file @inode, which holds an open reference:
 * truncate it for O_TRUNC and hand a phx.ko range to the kernel.
 */
int phxfs_open_file(struct phxfs *fs, fuse_req_t req, struct phxfs_inode *inode,
		    struct fuse_file_info *fi);

/* ---- readahead.c: sequential read-ahead of open files --------------- */
/* Bytes of a read taken from a read-ahead: give them back with
 * phxfs_ra_put() once answered. */
struct phxfs_ra_hit {
	void *host;
	struct phxfs_dev *dev;
	uint64_t len;
};

/* Start the workers (after the daemon forked); off on failure. */
void phxfs_ra_start(struct phxfs *fs);
void phxfs_ra_stop(void);
/* Set up @h's read-ahead, used when @on and the workers run. */
void phxfs_ra_init(struct phxfs_handle *h, bool on);
/* Wait for @h's read-ahead and free it; before @h goes. */
void phxfs_ra_release(struct phxfs_handle *h);
/*
 * Serve a read of @size bytes at @off from @h's read-ahead if it holds
 * exactly that and the data did not change since it was asked for; any
 * other read-ahead is thrown away.  May wait for one being copied.
 */
bool phxfs_ra_take(struct phxfs_handle *h, uint64_t off, size_t size,
		   struct phxfs_ra_hit *hit);
void phxfs_ra_put(struct phxfs_ra_hit *hit);
/*
 * After a read of @size bytes at @off, answered with @n bytes of the file
 * on @dev and not answered yet: read the next @size bytes ahead when this
 * one continued the last.
 */
void phxfs_ra_advance(struct phxfs_handle *h, struct phxfs_dev *dev,
		      uint64_t off, uint64_t n, size_t size);

/*
 * May a write by @uid that stores @len bytes at @off of @inode take more
 * device memory?  0, or -ENOSPC where it would dip into the device's root
 * reserve and @uid is not root; io_lock held.
 */
int phxfs_room_for(struct phxfs_inode *inode, uid_t uid, uint64_t off,
		   uint64_t len);
/*
 * Has a growth by @uid just taken memory of the root reserve?  Buffers
 * grow in chunks larger than the write that needs them (libphoenix's
 * geometric backing): the grower undoes it and fails with ENOSPC.
 */
bool phxfs_in_reserve(struct phxfs_inode *inode, uid_t uid);

/* ---- ctl.c, ctlsock.c: the control socket ---------------------------- */
int phxfs_ctl_start(struct phxfs *fs);
void phxfs_ctl_stop(struct phxfs *fs);

/* One connection to the control socket and the request it carries. */
struct phxfs_conn {
	struct phxfs *fs;
	int fd;
	struct ucred cred; /* SO_PEERCRED, at connect time */
	gid_t *groups; /* SO_PEERGROUPS: supplementary groups then */
	int ngroups;
	int fds[2]; /* descriptors sent with the request, -1 if none */
	bool dead; /* a send failed or timed out: nothing more is sent */
};

/* Send @n bytes to @c within the mount's ctl_timeout; 0 or -errno. */
int phxfs_conn_send(struct phxfs_conn *c, const void *buf, size_t n);
/* Is the caller of @c in group @gid (primary or supplementary)? */
bool phxfs_conn_in_group(const struct phxfs_conn *c, gid_t gid);
/*
 * May @c's caller read (4), write (2) or search (1) @inode, by its mode
 * bits as the kernel checks them?  fs->lock held.
 */
bool phxfs_conn_may(const struct phxfs_conn *c, const struct phxfs_inode *inode,
		    int mask);
/*
 * Check that @c's caller reached inode @ino through a path it may walk:
 * a descriptor @fd it sent (an O_PATH one that the caller opened: the
 * kernel checked search permission on every directory down to it) must
 * name that inode of this mount.  Root needs none.  0 or -EACCES.
 */
int phxfs_conn_reached(struct phxfs_conn *c, unsigned long long ino, int fd);
/* The mount's device number (st_dev of its files), 0 if unknown. */
dev_t phxfs_ctl_dev(struct phxfs *fs);
/* Format one line into @line (PHXFS_LINE_MAX): control bytes made '?'. */
int phxfs_conn_format(char *line, const char *fmt, va_list ap);
/* Send one line (control bytes made '?'); an error line for -errno @err. */
void phxfs_conn_line(struct phxfs_conn *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void phxfs_conn_err(struct phxfs_conn *c, int err, const char *what);
/* @s escaped for a line (phxfs_escape()), in @out. */
const char *phxfs_conn_esc(const char *s, char *out, size_t len);
/*
 * Take an open reference on regular file @ino for @c's caller, who must
 * have reached it (phxfs_conn_reached() with descriptor @path_fd) and may
 * access it as @mask asks (4 read, 2 write, 0 owner only): the inode, or
 * NULL after an error line naming @what.  phxfs_conn_file_put() drops it.
 */
struct phxfs_inode *phxfs_conn_file_get(struct phxfs_conn *c,
					unsigned long long ino, int path_fd,
					int mask, const char *what);
void phxfs_conn_file_put(struct phxfs *fs, struct phxfs_inode *inode);
/* Close the descriptors the client sent with its request (if any left). */
void phxfs_conn_fds_close(struct phxfs_conn *c);
/* One request's handler; ctlsock.c runs it on each connection's thread. */
typedef void phxfs_ctl_serve_fn(struct phxfs_conn *c, const char *line);
int phxfs_ctlsock_start(struct phxfs *fs, phxfs_ctl_serve_fn *serve);
void phxfs_ctlsock_stop(struct phxfs *fs);
/* CP and CPOUT of inode @ino from or to descriptor @fd (ctl_cp.c). */
void phxfs_ctl_cp(struct phxfs_conn *c, unsigned long long ino, int fd);
void phxfs_ctl_cp_out(struct phxfs_conn *c, unsigned long long ino, int fd);

#endif /* PHXFS_H */
