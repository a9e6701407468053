/* SPDX-License-Identifier: MIT */
/*
 * ctl.c - phxfs's control requests: status, sharing a file's memory with
 * another process, and the copies (ctl_cp.c), over the connections of
 * ctlsock.c.  One line per request, see phxfs_client.h; each connection
 * has a thread.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "phxfs.h"
#include "phxfs_client.h"

/* Most bytes of one STATUS reply: the rows past it are counted, not sent. */
#define STATUS_MAX (16U << 20)

static void do_open(struct phxfs_conn *c, unsigned long long ino)
{
	struct phxfs_inode *inode =
		phxfs_conn_file_get(c, ino, c->fds[0], 0, "OPEN");
	int ret;

	if (!inode)
		return;
	if (phxfs_dev_ranged(inode->dev)) {
		phxfs_conn_err(
			c, -EOPNOTSUPP,
			"OPEN: the file is a phx.ko range; mmap it through the mount instead");
		goto out;
	}
	pthread_rwlock_wrlock(&inode->io_lock);
	ret = phxfs_data_ensure(inode);
	if (ret) {
		pthread_rwlock_unlock(&inode->io_lock);
		phxfs_conn_line(c, "ERR %d OPEN: %s", -ret,
				phx_strerror_last());
		goto out;
	}
	/* the client writes the memory unseen: no read-ahead can be trusted */
	atomic_store(&inode->shared, true);
	phxfs_conn_line(c, "OK %s %llu", inode->dev->name,
			(unsigned long long)atomic_load(&inode->size));
	/* the socket's send time-out bounds this one (ctlsock.c) */
	ret = c->dead ? -EPIPE : phx_buf_send(inode->buf, c->fd);
	pthread_rwlock_unlock(&inode->io_lock);
	if (ret)
		fprintf(stderr, "phxfs: sharing inode %llu: %s\n", ino,
			phx_strerror_last());
out:
	phxfs_conn_file_put(c->fs, inode);
}

/*
 * Directory entries STATUS walks with fs->lock held before it lets go of
 * it once, so that the namespace's other users (lookups, creates) get
 * their turn however many files there are.
 */
#define STATUS_SLICE 1024

/* A reply built whole and sent after, with no lock held (STATUS). */
struct reply {
	char *p;
	size_t len, cap;
	uint64_t listed; /* FILE rows */
	bool full; /* no room for more rows */
	bool tail; /* the closing lines: room kept for them */
	bool nomem;
};

static bool reply_add(struct reply *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/*
 * Add one line; false (nothing added) past STATUS_MAX, less the room kept
 * for the closing lines until they come, or out of memory.
 */
static bool reply_add(struct reply *r, const char *fmt, ...)
{
	char line[PHXFS_LINE_MAX];
	va_list ap;
	size_t n;

	va_start(ap, fmt);
	n = (size_t)phxfs_conn_format(line, fmt, ap);
	va_end(ap);
	if (r->len + n > STATUS_MAX - (r->tail ? 0 : 4 * PHXFS_LINE_MAX)) {
		r->full = true;
		return false;
	}
	if (r->len + n > r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 64 << 10;
		char *p;

		while (cap < r->len + n)
			cap *= 2;
		p = realloc(r->p, cap);
		if (!p) {
			r->nomem = true;
			return false;
		}
		r->p = p;
		r->cap = cap;
	}
	memcpy(r->p + r->len, line, n);
	r->len += n;
	return true;
}

static void add_dev(struct reply *r, struct phxfs_dev *d)
{
	struct phx_device_info info;
	struct phx_stats st;
	uint64_t moved = 0, best = 0;
	enum phx_path path = PHX_PATH_NONE;
	unsigned int p;

	if (phx_device_info(d->dev, &info))
		return;
	phx_stats_get(d->dev, &st);
	for (p = 1; p < 5; p++) {
		moved += st.bytes[p];
		if (st.bytes[p] > best) {
			best = st.bytes[p];
			path = (enum phx_path)p;
		}
	}
	char model[4 * sizeof(info.model)];

	reply_add(r, "DEV %s %s %llu %llu %u %s %llu %llu %llu %llu %s",
		  d->name, phx_kind_name(d->kind),
		  (unsigned long long)info.capacity,
		  (unsigned long long)info.used, atomic_load(&d->files),
		  phx_path_name(path), (unsigned long long)moved,
		  (unsigned long long)atomic_load(&d->fuse_in),
		  (unsigned long long)atomic_load(&d->fuse_out),
		  (unsigned long long)d->reserve,
		  phxfs_conn_esc(info.model, model, sizeof(model)));
}

/* A FILE row; a path too long for a line is cut to ".../NAME". */
static void add_file(struct reply *r, struct phxfs_inode *inode,
		     const char *path, bool cut, const char *name)
{
	char tail[4 * PHXFS_NAME_MAX + 8] = ".../";

	if (cut)
		phxfs_escape(name, strlen(name), tail + 4, sizeof(tail) - 4);
	if (reply_add(r, "FILE %s %llu %llu %s %s", inode->dev->name,
		      (unsigned long long)phxfs_data_size(inode),
		      (unsigned long long)phxfs_data_held(inode),
		      phxfs_path_name(atomic_load(&inode->path)),
		      cut ? tail : path))
		r->listed++;
}

/* Per level of the walk: the entry walked into and the path before it. */
struct level {
	struct phxfs_dentry *d;
	size_t len;
	bool cut;
	char *name; /* d's name while fs->lock is let go */
};

/*
 * Let go of fs->lock and take it again, between two entries of the walk
 * at @stack (@depth levels) and *@d, the next entry (NULL: the end of its
 * directory).  Where no entry was freed meanwhile every pointer still
 * holds; else each level is found again by name.  False where one is
 * gone: the walk ends there.
 */
static bool walk_yield(struct phxfs *fs, struct level *stack, size_t depth,
		       struct phxfs_dentry **d)
{
	uint64_t gen = fs->dentry_gen;
	struct phxfs_inode *dir = fs->root;
	char *next = NULL;
	bool ok = true;
	size_t i;

	for (i = 0; i < depth; i++)
		stack[i].name = NULL;
	for (i = 0; i < depth && ok; i++)
		ok = (stack[i].name = strdup(stack[i].d->name)) != NULL;
	if (ok && *d)
		ok = (next = strdup((*d)->name)) != NULL;
	pthread_mutex_unlock(&fs->lock);
	pthread_mutex_lock(&fs->lock);
	if (ok && gen != fs->dentry_gen) {
		for (i = 0; i < depth && ok; i++) {
			struct phxfs_dentry *e =
				phxfs_dentry_find(fs, dir, stack[i].name);

			ok = e && S_ISDIR(e->inode->mode);
			if (ok) {
				stack[i].d = e;
				dir = e->inode;
			}
		}
		if (ok && next) {
			*d = phxfs_dentry_find(fs, dir, next);
			ok = *d != NULL;
		}
	}
	for (i = 0; i < depth; i++)
		free(stack[i].name);
	free(next);
	return ok;
}

/*
 * FILE rows for every regular file @c's caller could stat: those in the
 * directories it may search, from the root down.  Walked without
 * recursion (directories nest as deep as users make them), with fs->lock
 * held STATUS_SLICE entries at a time; the walk stops where the reply is
 * full.  False where it ended early (the reply full, or an entry of its
 * path removed while the lock was let go).
 */
static int add_files(struct phxfs_conn *c, struct reply *r, bool *whole)
{
	struct level *stack = NULL;
	size_t depth = 0, cap = 0, room = PHXFS_LINE_MAX - 256;
	struct phxfs_dentry *d;
	char *path = malloc(room + 1);
	unsigned int slice = 0;
	bool cut = false;
	size_t len = 0;

	*whole = true;
	if (!path)
		return -ENOMEM;
	path[0] = '\0';
	d = phxfs_conn_may(c, c->fs->root, 1) ? c->fs->root->children : NULL;
	for (;;) {
		if (r->full || r->nomem) {
			*whole = false;
			break;
		}
		if (++slice == STATUS_SLICE) {
			slice = 0;
			if (!walk_yield(c->fs, stack, depth, &d)) {
				*whole = false;
				break;
			}
		}
		if (!d) {
			if (!depth)
				break;
			depth--;
			d = stack[depth].d->sib_next;
			len = stack[depth].len;
			cut = stack[depth].cut;
			path[len] = '\0';
			continue;
		}
		struct phxfs_inode *inode = d->inode;
		size_t n = phxfs_escape(d->name, strlen(d->name),
					path + len + 1, room - len - 1);
		bool fits = !cut && len + 1 + n < room;

		if (fits)
			path[len] = '/';
		else
			path[len] = '\0';
		if (S_ISREG(inode->mode))
			add_file(r, inode, path, !fits, d->name);
		if (!S_ISDIR(inode->mode) || !inode->children ||
		    !phxfs_conn_may(c, inode, 1)) {
			path[len] = '\0';
			d = d->sib_next;
			continue;
		}
		if (depth == cap) {
			struct level *s;

			cap = cap ? 2 * cap : 64;
			s = realloc(stack, cap * sizeof(*s));
			if (!s) {
				free(stack);
				free(path);
				return -ENOMEM;
			}
			stack = s;
		}
		stack[depth++] = (struct level){ d, len, cut, NULL };
		if (fits)
			len += 1 + n;
		cut = !fits;
		d = inode->children;
	}
	free(stack);
	free(path);
	return 0;
}

/* "@what on", or "@what off <reason>" (escaped). */
static void add_switch(struct reply *r, const char *what, bool on,
		       const char *why)
{
	char buf[4 * PHXFS_WHY_MAX]; /* escaped: up to 4 bytes each */

	if (on)
		reply_add(r, "%s on", what);
	else
		reply_add(r, "%s off %s", what,
			  phxfs_conn_esc(why, buf, sizeof(buf)));
}

static void do_status(struct phxfs_conn *c)
{
	struct phxfs *fs = c->fs;
	struct reply r = { 0 };
	char mp[PHXFS_LINE_MAX - 8];
	uint64_t unlisted = 0;
	unsigned int i;
	bool whole;
	int ret;

	for (i = 0; i < fs->ndevs; i++)
		add_dev(&r, &fs->devs[i]);
	for (i = 0; i < fs->ndevs; i++)
		reply_add(&r, "REQS %s %llu %llu", fs->devs[i].name,
			  (unsigned long long)atomic_load(
				  &fs->devs[i].fuse_writes),
			  (unsigned long long)atomic_load(
				  &fs->devs[i].fuse_reads));
	for (i = 0; i < fs->ndevs; i++)
		reply_add(&r, "ROOTRESERVE %s %llu", fs->devs[i].name,
			  (unsigned long long)fs->devs[i].root_reserve);
	add_switch(&r, "PASSTHROUGH", fs->passthrough, fs->passthrough_why);
	add_switch(&r, "URING", fs->uring, fs->uring_why);
	pthread_mutex_lock(&fs->lock);
	reply_add(&r, "XATTR %llu %llu %llu",
		  (unsigned long long)fs->xattr_bytes,
		  (unsigned long long)fs->xattr_size,
		  (unsigned long long)fs->xattr_file);
	reply_add(&r, "INODES %llu %llu %llu", (unsigned long long)fs->ninodes,
		  (unsigned long long)fs->nentries,
		  (unsigned long long)fs->nr_inodes);
	ret = add_files(c, &r, &whole);
	/*
	 * Cut short: the files not listed, of all the mount's (those the
	 * caller may not see among them, as the DEV lines count them).
	 */
	if (!whole)
		unlisted = fs->nfiles > r.listed ? fs->nfiles - r.listed : 0;
	pthread_mutex_unlock(&fs->lock);
	pthread_mutex_lock(&fs->ctl_lock);
	reply_add(&r, "CTL %u %u %u", fs->ctl_nconns, fs->opts.ctl_conns,
		  fs->opts.ctl_conns_uid);
	pthread_mutex_unlock(&fs->ctl_lock);
	r.tail = true; /* the closing lines have their room */
	if (unlisted)
		reply_add(&r, "UNLISTED %llu", (unsigned long long)unlisted);
	reply_add(&r, "MOUNT %s",
		  phxfs_conn_esc(fs->mountpoint, mp, sizeof(mp)));
	/* sent without any lock held: a client that does not read holds
	 * up nobody but itself, for ctl_timeout at most */
	if (ret || r.nomem)
		phxfs_conn_err(c, -ENOMEM,
			       "STATUS: the daemon is out of memory");
	else if (!phxfs_conn_send(c, r.p, r.len))
		phxfs_conn_line(c, "END");
	free(r.p);
}

/*
 * Is the other end @fd of a copy open the way the copy uses it (@acc:
 * O_RDONLY for CP's source, O_WRONLY for CPOUT's destination)?  The
 * daemon runs as root: the engine must not be handed a descriptor that
 * the caller could not itself read or write with (an O_PATH one, or one
 * open the other way), or the copy would read or write what only the
 * daemon may.  Else the error line is sent.
 */
static bool fd_open_for(struct phxfs_conn *c, int fd, int acc, const char *what)
{
	int fl = fcntl(fd, F_GETFL);
	char msg[128];

	if (fl >= 0 && !(fl & O_PATH) &&
	    ((fl & O_ACCMODE) == O_RDWR || (fl & O_ACCMODE) == acc))
		return true;
	snprintf(msg, sizeof(msg), "%s: the %s descriptor is not open for %s",
		 what, acc == O_RDONLY ? "source" : "destination",
		 acc == O_RDONLY ? "reading" : "writing");
	phxfs_conn_err(c, -EBADF, msg);
	return false;
}

static void serve(struct phxfs_conn *c, const char *line)
{
	unsigned long long ino;

	if (!strcmp(line, "STATUS"))
		do_status(c);
	else if (sscanf(line, "OPEN %llu", &ino) == 1)
		do_open(c, ino);
	else if (sscanf(line, "CP %llu", &ino) == 1 && c->fds[0] >= 0) {
		if (fd_open_for(c, c->fds[0], O_RDONLY, "CP"))
			phxfs_ctl_cp(c, ino, c->fds[0]);
	} else if (sscanf(line, "CPOUT %llu", &ino) == 1 && c->fds[0] >= 0) {
		if (fd_open_for(c, c->fds[0], O_WRONLY, "CPOUT"))
			phxfs_ctl_cp_out(c, ino, c->fds[0]);
	} else {
		phxfs_conn_err(c, -EINVAL, "unknown request");
	}
}

int phxfs_ctl_start(struct phxfs *fs)
{
	return phxfs_ctlsock_start(fs, serve);
}

void phxfs_ctl_stop(struct phxfs *fs)
{
	phxfs_ctlsock_stop(fs);
}
