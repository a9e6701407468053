/* SPDX-License-Identifier: MIT */
/*
 * xattr_store.c - the extended attributes stored with an inode (host
 * memory, under fs->lock): a list of name and value pairs, counted
 * against xattr_file per inode and xattr_size in all (fs->xattr_bytes).
 * Below the inode table, which frees them with the inode; the FUSE
 * handlers (xattr.c) sit above both.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>

#include "phxfs.h"

/* One stored attribute: its name, then its value, in @data. */
struct phxfs_xattr {
	struct phxfs_xattr *next;
	size_t name_len, len;
	char data[];
};

static struct phxfs_xattr **find(const struct phxfs_inode *inode,
				 const char *name)
{
	struct phxfs_xattr **p = (struct phxfs_xattr **)&inode->xattrs;

	while (*p && strcmp((*p)->data, name))
		p = &(*p)->next;
	return p;
}

static size_t cost(const struct phxfs_xattr *x)
{
	return x->name_len + 1 + x->len;
}

size_t phxfs_xattr_stored(const struct phxfs_inode *inode)
{
	const struct phxfs_xattr *x;
	size_t n = 0;

	for (x = inode->xattrs; x; x = x->next)
		n += cost(x);
	return n;
}

int phxfs_xattr_remove(struct phxfs *fs, struct phxfs_inode *inode,
		       const char *name)
{
	struct phxfs_xattr **p = find(inode, name), *x = *p;

	if (!x)
		return -ENODATA;
	*p = x->next;
	fs->xattr_bytes -= cost(x);
	free(x);
	return 0;
}

void phxfs_xattr_free_all(struct phxfs *fs, struct phxfs_inode *inode)
{
	while (inode->xattrs) {
		struct phxfs_xattr *x = inode->xattrs;

		inode->xattrs = x->next;
		fs->xattr_bytes -= cost(x);
		free(x);
	}
}

int phxfs_xattr_set(struct phxfs *fs, struct phxfs_inode *inode,
		    const char *name, const char *value, size_t len, int flags)
{
	struct phxfs_xattr **p = find(inode, name), *old = *p, *x;
	size_t name_len = strlen(name), now = phxfs_xattr_stored(inode);
	size_t was = old ? cost(old) : 0, need = name_len + 1 + len;

	if (old && (flags & XATTR_CREATE))
		return -EEXIST;
	if (!old && (flags & XATTR_REPLACE))
		return -ENODATA;
	/* per file as ext4's one block, per mount as tmpfs's size= */
	if (now - was + need > fs->xattr_file ||
	    fs->xattr_bytes - was + need > fs->xattr_size)
		return -ENOSPC;
	x = malloc(sizeof(*x) + name_len + 1 + len);
	if (!x)
		return -ENOMEM;
	x->name_len = name_len;
	x->len = len;
	memcpy(x->data, name, name_len + 1);
	memcpy(x->data + name_len + 1, value, len);
	x->next = old ? old->next : NULL;
	*p = x;
	free(old);
	fs->xattr_bytes += need - was;
	return 0;
}

const void *phxfs_xattr_value(const struct phxfs_inode *inode, const char *name,
			      size_t *len)
{
	const struct phxfs_xattr *x = *find(inode, name);

	if (!x)
		return NULL;
	*len = x->len;
	return x->data + x->name_len + 1;
}

size_t phxfs_xattr_names(const struct phxfs_inode *inode, char *out)
{
	const struct phxfs_xattr *x;
	size_t len = 0;

	for (x = inode->xattrs; x; x = x->next) {
		memcpy(out + len, x->data, x->name_len + 1);
		len += x->name_len + 1;
	}
	return len;
}
