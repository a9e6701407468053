/* SPDX-License-Identifier: MIT */
/*
 * cp.c - phx cp: copy files, or trees with -r, into or out of phxfs
 * through the daemon's transfer engine (CP and CPOUT requests), with a
 * progress line.
 *
 * Below the paths it is given, phx cp works on directory descriptors and
 * names (the *at() calls) and never follows a symbolic link: a link
 * planted in a destination tree cannot send a copy elsewhere.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "phxfs_client.h"
#include "cli.h"

/* ---- cp ------------------------------------------------------------- */

/* One phx cp: what it copies and how far it got, for the progress line. */
struct cp_run {
	bool bar, quiet;
	bool out; /* phxfs -> elsewhere */
	double t0;
	unsigned long long total; /* bytes of all files */
	unsigned long long base; /* bytes of the files done */
	unsigned long long files;
	char path[32]; /* data path of the last file */
	char sock[256]; /* control socket of the phxfs side */
	dev_t ddev; /* the file system copied into */
	mode_t umask;
	int failed;
	bool stopped; /* a signal stopped the copy, and it was said */
	/* where the tree walk is, for messages */
	char spath[PATH_MAX], dpath[PATH_MAX];
};

/*
 * SIGINT, SIGTERM and SIGHUP stop a copy: the handler notes the signal
 * and wakes the wait for the daemon's answer through a pipe, and the copy
 * removes what it made before phx exits.
 */
static volatile sig_atomic_t cp_signal;
static int sig_pipe[2] = { -1, -1 };

static void on_signal(int sig)
{
	int err = errno;

	cp_signal = sig;
	if (write(sig_pipe[1], "", 1) < 0) {
		/* full: a wake-up is pending already */
	}
	errno = err;
}

static int catch_signals(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };
	struct sigaction sa = { .sa_handler = on_signal };
	unsigned int i;

	if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK))
		return -errno;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (sigaction(sigs[i], &sa, NULL))
			return -errno;
	return 0;
}

static void progress(unsigned long long done, unsigned long long total,
		     double t0)
{
	char d[32], t[32];
	double dt = cli_now() - t0;
	int width = 30, fill = total ? (int)(width * done / total) : width;

	fprintf(stderr, "\r[%.*s%*s] %3d%%  %s / %s  %.2f GB/s ", fill,
		"##############################", width - fill, "",
		total ? (int)(100 * done / total) : 100,
		cli_bytes(d, sizeof(d), (double)done),
		cli_bytes(t, sizeof(t), (double)total), cli_rate(done, dt));
}

static void end_bar(struct cp_run *r)
{
	if (r->bar)
		fputc('\n', stderr);
	r->bar = false;
}

static int cp_err(struct cp_run *r, const char *path, int err)
{
	end_bar(r);
	fprintf(stderr, "phx: cp: %s: %s\n", cli_quote(path), strerror(err));
	r->failed = 1;
	return -err;
}

/* The path through which @fd names what it was opened on. */
static const char *fd_path(int fd, char *buf, size_t len)
{
	snprintf(buf, len, "/proc/self/fd/%d", fd);
	return buf;
}

/*
 * Is @path on a phxfs mount (it answers the socket xattr)?  1 or 0, its
 * socket in @sock; -errno where the answer is refused (the caller may
 * not read @path).
 */
static int phxfs_at(const char *path, char *sock, size_t len)
{
	ssize_t n = getxattr(path, "user.phx.socket", sock, len - 1);

	if (n >= 0) {
		sock[n] = '\0';
		return 1;
	}
	if (errno == EACCES || errno == EPERM || errno == ENOENT ||
	    errno == ENOTDIR || errno == ENAMETOOLONG || errno == ELOOP)
		return -errno;
	return 0;
}

/* @dir, then "/", then @name into @out (PATH_MAX); 0 or -ENAMETOOLONG. */
static int join(char *out, const char *dir, const char *name)
{
	size_t n = strlen(dir);
	int len = snprintf(out, PATH_MAX, "%s%s%s", dir,
			   n && dir[n - 1] == '/' ? "" : "/", name);

	return len < 0 || len >= PATH_MAX ? -ENAMETOOLONG : 0;
}

/*
 * Split @path (shorter than PATH_MAX) into its directory @dir and its
 * last name @name, both PATH_MAX.
 */
static void split(const char *path, char *dir, char *name)
{
	char a[PATH_MAX], b[PATH_MAX];

	strcpy(a, path);
	strcpy(b, path);
	strcpy(dir, dirname(a));
	strcpy(name, basename(b));
}

/*
 * Is @path's directory missing below a directory of phxfs?  Then phx cp
 * says so rather than that neither side is on phxfs.
 */
static bool dir_missing_on_phxfs(const char *path)
{
	char dir[PATH_MAX], name[PATH_MAX], sock[256];
	struct stat st;

	split(path, dir, name);
	if (!stat(dir, &st))
		return false;
	while (strcmp(dir, "/") && strcmp(dir, ".")) {
		split(dir, dir, name);
		if (!stat(dir, &st))
			return phxfs_at(dir, sock, sizeof(sock)) == 1;
	}
	return false;
}

/*
 * Wait until @s has something to read; -EINTR once a signal stopped
 * the copy.
 */
static int wait_answer(int s)
{
	struct pollfd p[2] = { { .fd = s, .events = POLLIN },
			       { .fd = sig_pipe[0], .events = POLLIN } };

	for (;;) {
		if (cp_signal)
			return -EINTR;
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return -errno;
		if (cp_signal)
			return -EINTR;
		if (p[0].revents)
			return 0;
	}
}

/*
 * Stop the daemon's copy on @s, and wait until it let go of its files:
 * with the connection shut for reading, the daemon's next progress line
 * fails, it stops at the end of the step it is in, and closes its end
 * (POLLHUP here).  A second signal stops the wait.
 */
static void stop_copy(int s)
{
	struct pollfd p[2] = { { .fd = s, .events = 0 },
			       { .fd = sig_pipe[0], .events = POLLIN } };
	char drain[16];

	while (read(sig_pipe[0], drain, sizeof(drain)) > 0)
		;
	if (shutdown(s, SHUT_RD))
		return;
	while (poll(p, 2, PHXFS_CLIENT_TIMEOUT * 1000) < 0 && errno == EINTR)
		;
}

/*
 * Send @req ("CP <ino>" or "CPOUT <ino>") with @fd and the O_PATH
 * descriptor @pfd of the phxfs file to the daemon, show its progress, and
 * wait for its answer.  0 or -errno; -EINTR, said by the caller, when a
 * signal stopped the copy.
 */
static int request(struct cp_run *r, const char *req, int fd, int pfd,
		   const char *what)
{
	char line[PHXFS_LINE_MAX], via[64];
	unsigned long long done, total;
	int s, ret;

	if (cp_signal)
		return -EINTR;
	s = phxfs_connect(r->sock);
	if (s < 0) {
		end_bar(r);
		fprintf(stderr, "phx: cp: cannot reach phxfs at %s: %s\n",
			cli_quote(r->sock), strerror(-s));
		return s;
	}
	snprintf(line, sizeof(line), "%s\n", req);
	ret = phxfs_send_request(s, line, fd, fd_path(pfd, via, sizeof(via)));
	if (ret) {
		end_bar(r);
		fprintf(stderr, "phx: cp: %s: cannot send the request: %s\n",
			cli_quote(what), strerror(-ret));
	}
	while (!ret && !(ret = wait_answer(s)) &&
	       (ret = phxfs_read_line(s, line, sizeof(line))) >= 0) {
		ret = 0;
		if (sscanf(line, "PROGRESS %llu %llu", &done, &total) == 2) {
			if (r->bar)
				progress(r->base + done, r->total, r->t0);
			continue;
		}
		if (sscanf(line, "OK %llu %31s", &done, r->path) == 2) {
			r->base += done;
			r->files++;
			break;
		}
		ret = phxfs_line_err(line);
		end_bar(r);
		fprintf(stderr, "phx: cp: %s: %s\n", cli_quote(what), line);
		break;
	}
	if (ret == -EPIPE) {
		struct statvfs sv;

		end_bar(r);
		if (fstatvfs(pfd, &sv) && cli_dead_mount_err(errno)) {
			/* nothing of it can be removed, nor needs to be */
			fprintf(stderr,
				"phx: cp: %s: phxfs died during the copy; its files are gone with it\n",
				cli_quote(what));
			ret = -ENOTCONN;
		} else {
			fprintf(stderr, "phx: cp: %s: phxfs at %s hung up\n",
				cli_quote(what), cli_quote(r->sock));
		}
	} else if (ret == -ETIMEDOUT) {
		end_bar(r);
		fprintf(stderr,
			"phx: cp: %s: phxfs at %s sent nothing for %d s; is the daemon stuck?\n",
			cli_quote(what), cli_quote(r->sock),
			PHXFS_CLIENT_TIMEOUT);
	}
	if (ret == -EINTR)
		stop_copy(s);
	close(s);
	return ret;
}

/* A one-line message about @path; the copy failed. */
static void cp_say(struct cp_run *r, const char *path, const char *what)
{
	end_bar(r);
	fprintf(stderr, "phx: cp: %s: %s\n", cli_quote(path), what);
	r->failed = 1;
}

/* Where a copy stopped by a signal leaves things: one line. */
static void cp_stopped(struct cp_run *r, const char *path, const char *what)
{
	end_bar(r);
	fprintf(stderr, "phx: cp: %s: stopped by %s; %s\n", cli_quote(path),
		strsignal(cp_signal), what);
	r->failed = 1;
	r->stopped = true;
}

/*
 * Does @fd, a regular file, read what its size says?  procfs and sysfs
 * files give a size (0, or a page) that has nothing to do with what they
 * read, and a copy sized by it would be empty or cut.  0 or a message.
 */
static int check_size(struct cp_run *r, int fd, const struct stat *st,
		      const char *path)
{
	char probe[2];
	off_t at = st->st_size ? st->st_size - 1 : 0;
	ssize_t n = pread(fd, probe, sizeof(probe), at);

	if (n < 0)
		return cp_err(r, path, errno);
	if (n == (st->st_size ? 1 : 0))
		return 0;
	end_bar(r);
	fprintf(stderr,
		"phx: cp: %s: its size (%lld bytes) is not what it reads (a procfs or sysfs file?); copy it with cp\n",
		cli_quote(path), (long long)st->st_size);
	r->failed = 1;
	return -EINVAL;
}

/*
 * Copy the open regular file @sfd (@spath) into the phxfs file @name of
 * directory @ddir (@dpath).  @name is made with @sfd's permission bits
 * (and the umask), or an existing regular file is overwritten in place
 * (it keeps its mode): the daemon sizes it once it has taken the copy,
 * so a refused copy leaves it as it was.  A symbolic link there is
 * refused, never followed.
 */
static int cp_in(struct cp_run *r, int sfd, const char *spath, int ddir,
		 const char *name, const char *dpath)
{
	struct stat sst, st;
	bool created;
	char req[64];
	int pfd, ret;

	if (fstat(sfd, &sst))
		return cp_err(r, spath, errno);
	if (!S_ISREG(sst.st_mode)) {
		cp_say(r, spath,
		       "not a regular file or directory; skipped (copy it with cp)");
		return -EINVAL;
	}
	ret = check_size(r, sfd, &sst, spath);
	if (ret)
		return ret;
	/*
	 * Make DST without keeping it open: on phx.ko devices an open file
	 * pins the file's device memory in place, and the daemon may have
	 * to move it to make room for SRC.  The daemon overwrites every byte
	 * of an existing file, so the device memory it keeps is reused, not
	 * freed and allocated again.
	 */
	created = !mknodat(ddir, name, S_IFREG | (sst.st_mode & 0777), 0);
	if (!created && errno != EEXIST)
		return cp_err(r, dpath, errno);
	pfd = openat(ddir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (pfd < 0)
		return cp_err(r, dpath, errno);
	if (fstat(pfd, &st)) {
		ret = cp_err(r, dpath, errno);
		goto out;
	}
	ret = -EINVAL;
	if (S_ISLNK(st.st_mode)) {
		cp_say(r, dpath,
		       "a symbolic link; phx cp does not follow links into phxfs");
		goto out;
	}
	if (S_ISDIR(st.st_mode)) {
		ret = cp_err(r, dpath, EISDIR);
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		cp_say(r, dpath, "not a regular file; remove it first");
		goto out;
	}
	if (st.st_dev != r->ddev) {
		cp_say(r, dpath, "not on phxfs (something is mounted there)");
		goto out;
	}
	snprintf(req, sizeof(req), "CP %llu", (unsigned long long)st.st_ino);
	ret = request(r, req, sfd, pfd, dpath);
	if (!ret)
		goto out;
	r->failed = 1;
	if (ret == -ENOTCONN) {
		/* said: the daemon died, and the file with it */
	} else if (created) {
		/* nothing half-made stays behind holding device memory */
		if (!unlinkat(ddir, name, 0)) {
			if (ret == -EINTR)
				cp_stopped(r, dpath,
					   "the partial copy was removed");
		} else {
			end_bar(r);
			fprintf(stderr,
				"phx: cp: %s: the failed copy could not be removed: %s; remove it with rm\n",
				cli_quote(dpath), strerror(errno));
		}
	} else if (ret == -EINTR) {
		cp_stopped(
			r, dpath,
			"it was being overwritten in place and may hold only part of the source");
	} else if (!fstat(pfd, &sst) && sst.st_size != st.st_size) {
		end_bar(r);
		fprintf(stderr,
			"phx: cp: %s was overwritten in place and now holds only the first %llu bytes of %s; its old contents are gone\n",
			cli_quote(dpath), (unsigned long long)sst.st_size,
			cli_quote(spath));
	}
out:
	close(pfd);
	return ret;
}

/*
 * Copy the phxfs file @spfd (O_PATH, @spath) out to @name in directory
 * @ddir (@dpath): the daemon writes a temporary file in @ddir, which
 * replaces @name only once complete.  A new file gets @spfd's permission
 * bits less the umask, an existing one keeps its mode.  @follow: a
 * symbolic link at @name is written through (the destination named on
 * the command line, as cp does); in a tree it is refused.
 */
static int cp_out(struct cp_run *r, int spfd, const char *spath, int ddir,
		  const char *name, const char *dpath, bool follow)
{
	char tmp[80], req[64], via[PATH_MAX], dir[PATH_MAX], base[PATH_MAX];
	char sock[256];
	struct stat sst, st;
	mode_t mode;
	int fd, ret, tdir;

	if (fstat(spfd, &sst))
		return cp_err(r, spath, errno);
	if (!S_ISREG(sst.st_mode))
		return cp_err(r, spath, S_ISDIR(sst.st_mode) ? EISDIR : EINVAL);
	if (fstatat(ddir, name, &st, AT_SYMLINK_NOFOLLOW)) {
		if (errno != ENOENT)
			return cp_err(r, dpath, errno);
		mode = sst.st_mode & 0777 & ~r->umask;
	} else if (S_ISLNK(st.st_mode) && follow) {
		/* where the link leads: the copy replaces that file */
		snprintf(via, sizeof(via), "/proc/self/fd/%d/%s", ddir, name);
		if (!realpath(via, dir)) {
			if (errno != ENOENT)
				return cp_err(r, dpath, errno);
			cp_say(r, dpath,
			       "a symbolic link to nothing; not written through");
			return -ENOENT;
		}
		split(dir, dir, base);
		tdir = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (tdir < 0)
			return cp_err(r, dir, errno);
		if (phxfs_at(fd_path(tdir, via, sizeof(via)), sock,
			     sizeof(sock)) == 1) {
			close(tdir);
			cp_say(r, dpath,
			       "a symbolic link into phxfs; phx cp copies between phxfs and other file systems");
			return -EXDEV;
		}
		ret = cp_out(r, spfd, spath, tdir, base, dpath, false);
		close(tdir);
		return ret;
	} else if (S_ISLNK(st.st_mode)) {
		cp_say(r, dpath,
		       "a symbolic link; phx cp -r does not write through links");
		return -EINVAL;
	} else if (S_ISDIR(st.st_mode)) {
		return cp_err(r, dpath, EISDIR);
	} else if (!S_ISREG(st.st_mode)) {
		cp_say(r, dpath, "not a regular file; remove it first");
		return -EINVAL;
	} else {
		mode = st.st_mode & 0777;
	}
	/* a short name of its own: DST's name may take all of NAME_MAX */
	snprintf(via, sizeof(via), "/proc/self/fd/%d/.phx-cp-XXXXXX", ddir);
	fd = mkostemp(via, O_CLOEXEC);
	if (fd < 0)
		return cp_err(r, dpath, errno);
	snprintf(tmp, sizeof(tmp), "%s", strrchr(via, '/') + 1);
	if (fchmod(fd, mode)) {
		ret = cp_err(r, dpath, errno);
		goto out;
	}
	snprintf(req, sizeof(req), "CPOUT %llu",
		 (unsigned long long)sst.st_ino);
	ret = request(r, req, fd, spfd, dpath);
	if (!ret && renameat(ddir, tmp, ddir, name))
		ret = cp_err(r, dpath, errno);
out:
	close(fd);
	if (ret) {
		r->failed = 1;
		unlinkat(ddir, tmp, 0);
		if (ret == -EINTR)
			cp_stopped(
				r, dpath,
				"the partial copy was removed; the destination is as it was");
	}
	return ret;
}

/*
 * Bytes of the regular files in directory @dir, not following links nor
 * going into the file system copied into; for the progress bar.
 */
static unsigned long long tree_size(struct cp_run *r, int dir)
{
	unsigned long long n = 0;
	struct dirent *de;
	struct stat st;
	DIR *d = fdopendir(dir);

	if (!d) {
		close(dir);
		return 0;
	}
	while ((de = readdir(d))) {
		int sub;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW))
			continue;
		if (S_ISREG(st.st_mode))
			n += (unsigned long long)st.st_size;
		if (!S_ISDIR(st.st_mode) || st.st_dev == r->ddev)
			continue;
		sub = openat(dirfd(d), de->d_name,
			     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub >= 0)
			n += tree_size(r, sub);
	}
	closedir(d);
	return n;
}

/* One entry @name of source directory @sdir, into destination @ddir. */
static void cp_entry(struct cp_run *r, int sdir, const char *name, int ddir);

/* Add @name to the path in @buf (PATH_MAX); its old length, or -1. */
static int path_push(struct cp_run *r, char *buf, const char *name)
{
	size_t len = strlen(buf), n = strlen(name);
	bool slash = !len || buf[len - 1] != '/';

	if (len + slash + n >= PATH_MAX) {
		end_bar(r);
		fprintf(stderr, "phx: cp: %s/%s: %s\n", cli_quote(buf),
			cli_quote(name), strerror(ENAMETOOLONG));
		r->failed = 1;
		return -1;
	}
	if (slash)
		buf[len] = '/';
	memcpy(buf + len + slash, name, n + 1);
	return (int)len;
}

/*
 * Copy source directory @sfd (r->spath; closed here) into directory
 * @name of @ddir (r->dpath), making it with @sfd's mode less the umask
 * (writable and searchable by its owner while it is filled).  The rest
 * goes on after a file fails, and r->failed says so.
 */
static void cp_tree(struct cp_run *r, int sfd, int ddir, const char *name)
{
	mode_t want = 0, made = 0;
	struct dirent *de;
	struct stat st;
	bool created;
	int dfd;
	DIR *d;

	if (fstat(sfd, &st)) {
		cp_err(r, r->spath, errno);
		close(sfd);
		return;
	}
	want = st.st_mode & 0777 & ~r->umask;
	made = (st.st_mode & 0777) | S_IWUSR | S_IXUSR;
	created = !mkdirat(ddir, name, made);
	if (!created && errno != EEXIST) {
		cp_err(r, r->dpath, errno);
		close(sfd);
		return;
	}
	dfd = openat(ddir, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0 || fstat(dfd, &st)) {
		struct stat lst;

		if ((errno == ELOOP || errno == ENOTDIR) &&
		    !fstatat(ddir, name, &lst, AT_SYMLINK_NOFOLLOW))
			cp_say(r, r->dpath,
			       S_ISLNK(lst.st_mode) ?
				       "a symbolic link; phx cp -r does not follow links in the destination" :
				       "not a directory");
		else
			cp_err(r, r->dpath, errno);
		if (dfd >= 0)
			close(dfd);
		close(sfd);
		return;
	}
	if (!r->out && st.st_dev != r->ddev) {
		cp_say(r, r->dpath,
		       "not on phxfs (something is mounted there)");
		close(dfd);
		close(sfd);
		return;
	}
	d = fdopendir(sfd);
	if (!d) {
		cp_err(r, r->spath, errno);
		close(sfd);
		close(dfd);
		return;
	}
	while (!cp_signal && (de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		cp_entry(r, dirfd(d), de->d_name, dfd);
	}
	closedir(d);
	if (created && (made & ~r->umask) != want) {
		char via[64];

		if (chmod(fd_path(dfd, via, sizeof(via)), want))
			cp_err(r, r->dpath, errno);
	}
	close(dfd);
}

static void cp_entry(struct cp_run *r, int sdir, const char *name, int ddir)
{
	int slen = path_push(r, r->spath, name), dlen, fd;
	struct stat st;

	if (slen < 0)
		return;
	dlen = path_push(r, r->dpath, name);
	if (dlen < 0)
		goto out_s;
	if (fstatat(sdir, name, &st, AT_SYMLINK_NOFOLLOW)) {
		cp_err(r, r->spath, errno);
	} else if (S_ISDIR(st.st_mode) && st.st_dev == r->ddev) {
		/* phxfs mounted in the tree copied into it: it never ends */
		cp_say(r, r->spath,
		       "on the file system copied into; not copied into itself");
	} else if (S_ISDIR(st.st_mode)) {
		fd = openat(sdir, name,
			    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			cp_err(r, r->spath, errno);
		else
			cp_tree(r, fd, ddir, name);
	} else if (S_ISREG(st.st_mode)) {
		/* O_NONBLOCK: what replaced the file may be a FIFO */
		fd = openat(sdir, name,
			    (r->out ? O_PATH : O_RDONLY | O_NONBLOCK) |
				    O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			cp_err(r, r->spath, errno);
		} else if (r->out) {
			cp_out(r, fd, r->spath, ddir, name, r->dpath, false);
			close(fd);
		} else {
			/* the daemon reads it: plain blocking reads */
			fcntl(fd, F_SETFL, 0);
			cp_in(r, fd, r->spath, ddir, name, r->dpath);
			close(fd);
		}
	} else {
		cp_say(r, r->spath,
		       "not a regular file or directory; skipped (copy it with cp)");
	}
	r->dpath[dlen] = '\0';
out_s:
	r->spath[slen] = '\0';
}

int cli_cp(int argc, char **argv)
{
	struct cp_run r = { .t0 = cli_now() };
	char dst[PATH_MAX], dir[PATH_MAX], name[PATH_MAX], via[64];
	char srcname[PATH_MAX], ssock[256], dsock[256];
	const char *src;
	int src_on, dst_on, ddir, sfd;
	bool recurse = false;
	struct stat st, sst, dst_st;
	double dt;
	char b[32];
	int opt;

	while ((opt = getopt(argc, argv, ":qr")) != -1) {
		if (opt == 'q')
			r.quiet = true;
		else if (opt == 'r')
			recurse = true;
		else
			return cli_bad_option("cp", opt);
	}
	if (argc - optind != 2)
		return cli_usage_err("cp", argc - optind < 2 ?
						   "SRC and DST are needed" :
						   "one SRC and one DST only");
	src = argv[optind];
	r.umask = umask(0);
	umask(r.umask);
	if (strlen(src) >= PATH_MAX) {
		cp_err(&r, src, ENAMETOOLONG);
		return 1;
	}
	if (strlen(argv[optind + 1]) >= PATH_MAX) {
		cp_err(&r, argv[optind + 1], ENAMETOOLONG);
		return 1;
	}
	if (stat(src, &sst)) {
		cp_err(&r, src, errno);
		return 1;
	}
	if (S_ISDIR(sst.st_mode) && !recurse) {
		fprintf(stderr,
			"phx: cp: %s is a directory; use phx cp -r to copy it\n",
			cli_quote(src));
		return 1;
	}
	if (!S_ISDIR(sst.st_mode) && !S_ISREG(sst.st_mode)) {
		fprintf(stderr,
			"phx: cp: %s is not a regular file or directory; copy it with cp\n",
			cli_quote(src));
		return 1;
	}
	src_on = phxfs_at(src, ssock, sizeof(ssock));
	if (src_on < 0) {
		cp_err(&r, src, -src_on);
		return 1;
	}
	/* DST, or DST/SRC's name where DST is a directory */
	strcpy(dst, argv[optind + 1]);
	if (!stat(dst, &dst_st) && S_ISDIR(dst_st.st_mode)) {
		split(src, dir, srcname);
		if (join(dst, argv[optind + 1], srcname)) {
			end_bar(&r);
			fprintf(stderr, "phx: cp: %s/%s: %s\n",
				cli_quote(argv[optind + 1]), cli_quote(srcname),
				strerror(ENAMETOOLONG));
			return 1;
		}
	}
	split(dst, dir, name);
	ddir = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (ddir < 0) {
		if (errno == ENOENT && src_on != 1 &&
		    dir_missing_on_phxfs(dst)) {
			fprintf(stderr,
				"phx: cp: %s: no such directory on phxfs; create it first (mkdir -p)\n",
				cli_quote(dir));
			return 1;
		}
		cp_err(&r, dst, errno);
		return 1;
	}
	/* where the copy lands is judged on the directory it lands in */
	dst_on =
		phxfs_at(fd_path(ddir, via, sizeof(via)), dsock, sizeof(dsock));
	if (dst_on < 0 || fstat(ddir, &st)) {
		cp_err(&r, dir, dst_on < 0 ? -dst_on : errno);
		goto out;
	}
	r.ddev = st.st_dev;
	if (src_on == 1 && dst_on == 1) {
		fprintf(stderr,
			"phx: cp: %s and %s are both on phxfs; phx cp copies between phxfs and other file systems, use cp or mv within it\n",
			cli_quote(src), cli_quote(dst));
		r.failed = 1;
		goto out;
	}
	if (src_on != 1 && dst_on != 1) {
		fprintf(stderr,
			"phx: cp: neither %s nor %s is on phxfs; is phxfs mounted (phx mount)?\n",
			cli_quote(src), cli_quote(dst));
		r.failed = 1;
		goto out;
	}
	r.out = src_on == 1;
	strcpy(r.sock, r.out ? ssock : dsock);
	if (catch_signals()) {
		cp_err(&r, src, errno);
		goto out;
	}
	r.bar = !r.quiet && isatty(2);
	if (S_ISDIR(sst.st_mode)) {
		sfd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (sfd < 0) {
			cp_err(&r, src, errno);
			goto out;
		}
		if (r.bar)
			r.total = tree_size(
				&r, openat(sfd, ".",
					   O_RDONLY | O_DIRECTORY | O_CLOEXEC));
		strcpy(r.spath, src);
		strcpy(r.dpath, dst);
		cp_tree(&r, sfd, ddir, name);
	} else {
		/* O_NONBLOCK: what replaced the file may be a FIFO */
		sfd = open(src, (r.out ? O_PATH : O_RDONLY | O_NONBLOCK) |
					O_CLOEXEC);
		if (sfd < 0) {
			cp_err(&r, src, errno);
			goto out;
		}
		if (!r.out)
			fcntl(sfd, F_SETFL, 0);
		r.total = (unsigned long long)sst.st_size;
		if (r.out)
			cp_out(&r, sfd, src, ddir, name, dst, true);
		else
			cp_in(&r, sfd, src, ddir, name, dst);
		close(sfd);
	}
	if (r.bar && r.files)
		progress(r.base, r.total, r.t0);
	end_bar(&r);
	if (cp_signal && !r.stopped)
		fprintf(stderr, "phx: cp: stopped by %s\n",
			strsignal(cp_signal));
	dt = cli_now() - r.t0;
	if (!r.quiet && r.files)
		fprintf(stderr,
			"%llu file%s, %s in %.2f s, %.2f GB/s, path %s\n",
			r.files, r.files == 1 ? "" : "s",
			cli_bytes(b, sizeof(b), (double)r.base), dt,
			cli_rate(r.base, dt), r.path);
out:
	close(ddir);
	if (cp_signal)
		return 128 + cp_signal;
	return r.failed ? 1 : 0;
}
