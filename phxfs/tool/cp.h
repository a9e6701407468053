/* SPDX-License-Identifier: MIT */
/*
 * cp.h - what the files of phx cp share: the state of one copy, and what
 * each file offers the others.  cp.c runs the command, cp_tree.c copies
 * trees (-r), cp_file.c one file in or out, cp_request.c talks to the
 * daemon, cp_print.c prints, cp_path.c finds its way among paths; each
 * uses only the files after it in this list.
 */
#ifndef PHX_CP_H
#define PHX_CP_H

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

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

/* cp_tree.c */
/*
 * Bytes of the regular files in directory @dir (closed here), not
 * following links nor going into the file system copied into; for the
 * progress bar.
 */
unsigned long long cp_tree_size(struct cp_run *r, int dir);
/*
 * Copy source directory @sfd (r->spath; closed here) into directory
 * @name of @ddir (r->dpath), making it with @sfd's mode less the umask
 * (writable and searchable by its owner while it is filled).  The rest
 * goes on after a file fails, and r->failed says so.
 */
void cp_tree(struct cp_run *r, int sfd, int ddir, const char *name);

/* cp_file.c */
/*
 * Copy the open regular file @sfd (@spath) into the phxfs file @name of
 * directory @ddir (@dpath).  @name is made with @sfd's permission bits
 * (and the umask), or an existing regular file is overwritten in place
 * (it keeps its mode): the daemon sizes it once it has taken the copy,
 * so a refused copy leaves it as it was.  A symbolic link there is
 * refused, never followed.
 */
int cp_in(struct cp_run *r, int sfd, const char *spath, int ddir,
	  const char *name, const char *dpath);
/*
 * Copy the phxfs file @spfd (O_PATH, @spath) out to @name in directory
 * @ddir (@dpath): the daemon writes a temporary file in @ddir, which
 * replaces @name only once complete.  A new file gets @spfd's permission
 * bits less the umask, an existing one keeps its mode.  @follow: a
 * symbolic link at @name is written through (the destination named on
 * the command line, as cp does); in a tree it is refused.
 */
int cp_out(struct cp_run *r, int spfd, const char *spath, int ddir,
	   const char *name, const char *dpath, bool follow);

/* cp_request.c */
/*
 * The signal (SIGINT, SIGTERM or SIGHUP) that stopped the copy; 0 while
 * none did.
 */
extern volatile sig_atomic_t cp_signal;
/* Let SIGINT, SIGTERM and SIGHUP stop the copy, not phx; 0 or -errno. */
int cp_catch_signals(void);
/*
 * Send @req ("CP <ino>" or "CPOUT <ino>") with @fd and the O_PATH
 * descriptor @pfd of the phxfs file to the daemon, show its progress, and
 * wait for its answer.  0 or -errno; -EINTR, said by the caller, when a
 * signal stopped the copy.
 */
int cp_request(struct cp_run *r, const char *req, int fd, int pfd,
	       const char *what);
/* Where a copy stopped by a signal leaves things: one line. */
void cp_stopped(struct cp_run *r, const char *path, const char *what);

/* cp_print.c */
/* The progress bar: @done bytes of @total, and the rate since @t0. */
void cp_progress(unsigned long long done, unsigned long long total, double t0);
/* End the progress bar's line, if one is shown, before a message. */
void cp_end_bar(struct cp_run *r);
/* A one-line message: @path and strerror(@err); the copy failed.  -@err. */
int cp_err(struct cp_run *r, const char *path, int err);
/* A one-line message about @path; the copy failed. */
void cp_say(struct cp_run *r, const char *path, const char *what);

/* cp_path.c */
/* The path through which @fd names what it was opened on. */
const char *cp_fd_path(int fd, char *buf, size_t len);
/*
 * Is @path on a phxfs mount (it answers the socket xattr)?  1 or 0, its
 * socket in @sock; -errno where the answer is refused (the caller may
 * not read @path).
 */
int cp_phxfs_at(const char *path, char *sock, size_t len);
/*
 * Split @path (shorter than PATH_MAX) into its directory @dir and its
 * last name @name, both PATH_MAX.
 */
void cp_split(const char *path, char *dir, char *name);

/*
 * Whether directory @path, on phxfs, is its top level (which holds only
 * the devices' directories: nothing can be copied there).
 */
bool cp_phxfs_top(const char *path);

#endif /* PHX_CP_H */
