/* SPDX-License-Identifier: GPL-2.0 */
/*
 * phx.h - internal interfaces between the parts of phx.ko.
 */
#ifndef PHX_H
#define PHX_H

#include <linux/fs.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/memremap.h>
#include <linux/miscdevice.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/rwsem.h>
#include <linux/workqueue.h>

#include "phx_uapi.h"

struct gen_pool;
struct phx_range;

/**
 * struct phx_dev - one device whose memory phx.ko exposes as /dev/phxN.
 * @kref: held by the PCI binding and by every open file and range.
 * @pdev: the PCI device whose BAR holds the memory (a reference is held).
 * @provider: enum phx_provider.
 * @bar: the BAR index.
 * @index: N in /dev/phxN.
 * @name: "phxN".
 * @phys: CPU physical address of the BAR.
 * @bus: bus address of the BAR (what other PCI devices DMA to).
 * @size: bytes managed (the BAR size).
 * @pgmap: ZONE_DEVICE page map over the BAR, unless P2PDMA made it.
 * @pool: allocator of BAR ranges (PHX_PROVIDER_BAR without P2PDMA).
 * @allocated: bytes handed out as ranges.
 * @misc: the character device.
 * @published: @misc is registered.
 * @lock: held for read while pages are handed out (mmap, read, write);
 *	  taken for write to tear the pages down.  Never held while a user
 *	  page is faulted in: the fault may be on a mapping of this device.
 * @dead: no access to the pages any more; protected by @lock.
 * @ranges_lock: protects @ranges and @pending.
 * @ranges: live ranges: each from before its memory is taken until its
 *	    file goes (or it is given up before it has one).
 * @pending: ranges already closed whose pages are still pinned.
 * @reap_work: retries @pending.
 */
struct phx_dev {
	struct kref kref;
	struct pci_dev *pdev;
	enum phx_provider provider;
	int bar;
	int index;
	char name[16];
	phys_addr_t phys;
	pci_bus_addr_t bus;
	resource_size_t size;
	struct dev_pagemap pgmap;
	struct gen_pool *pool;
	atomic64_t allocated;
	struct miscdevice misc;
	bool published;
	struct rw_semaphore lock;
	bool dead;
	struct mutex ranges_lock;
	struct list_head ranges;
	struct list_head pending;
	struct delayed_work reap_work;
};

/**
 * struct phx_range_ops - how a kind of range gives its memory back.
 * @release: called once no page of the range is pinned any more, or
 *	     when the device goes away; frees the memory, not the range.
 * @trim: give back the pages from the given index on, which nobody maps
 *	  or pins; NULL where memory cannot be given back piecewise.
 */
struct phx_range_ops {
	void (*release)(struct phx_range *range);
	int (*trim)(struct phx_range *range, unsigned long keep);
};

/**
 * struct phx_range - a piece of device memory handed to userspace.
 * @phx: its device (a reference is held).
 * @ops: how to give the memory back.
 * @node: in @phx->ranges or @phx->pending, protected by its ranges_lock.
 * @inode: the inode of the range's file; NULL until the file exists, set
 *	   under @phx->ranges_lock.
 * @pages: the ZONE_DEVICE pages, in file order.
 * @nr_pages: entries in @pages.
 * @offset: offset of @pages[0] in the device memory.
 * @contiguous: the pages are one run of device memory.
 * @grow: PHX_ALLOC_GROW: the file's size is its own, up to @nr_pages
 *	  pages; @nr_pages shrinks with PHX_IOC_TRIM (under @phx->lock
 *	  held for write and the inode lock).
 * @released: @ops->release has run, or no memory is taken yet; protected
 *	      by @phx->ranges_lock, except that the allocator clears it
 *	      under @phx->lock held for read, having seen @phx->dead false:
 *	      phx_dev_kill() reads it only after setting @dead.
 * @revoked: the exporter took the memory back; protected by @phx->lock.
 * @priv: owned by @ops.
 */
struct phx_range {
	struct phx_dev *phx;
	const struct phx_range_ops *ops;
	struct list_head node;
	struct inode *inode;
	struct page **pages;
	unsigned long nr_pages;
	u64 offset;
	bool contiguous;
	bool grow;
	bool released;
	bool revoked;
	void *priv;
};

static inline u64 phx_range_size(const struct phx_range *range)
{
	return (u64)range->nr_pages << PAGE_SHIFT;
}

static inline struct phx_range *phx_file_range(struct file *file)
{
	return file_inode(file)->i_private;
}

/* Bytes a reader or a fault may reach: the file's size.  Under phx->lock. */
static inline u64 phx_range_end(const struct phx_range *range)
{
	lockdep_assert_held(&range->phx->lock);
	if (range->grow)
		return i_size_read(range->inode);
	return phx_range_size(range);
}

/* phx_main.c */
struct phx_dev *phx_dev_create(struct pci_dev *pdev, enum phx_provider provider,
			       int bar);
int phx_dev_publish(struct phx_dev *phx);
void phx_dev_kill(struct phx_dev *phx);
void phx_dev_put(struct phx_dev *phx);

/* phx_range.c */
struct phx_range *phx_range_create(struct phx_dev *phx, unsigned long nr_pages,
				   const struct phx_range_ops *ops);
void phx_range_track(struct phx_range *range);
void phx_range_destroy(struct phx_range *range);
int phx_range_install(struct phx_range *range, void __user *uarg,
		      void *arg, size_t len, __s32 *fd_field);
void phx_range_zap(struct phx_range *range);
bool phx_range_pinned(const struct phx_range *range);
void phx_dev_reap(struct phx_dev *phx);
long phx_range_trim(struct phx_range *range);

/* phx_range_io.c */
void phx_range_clear(struct phx_range *range, u64 from, u64 to);
void phx_range_set_size(struct phx_range *range, u64 old, u64 size);
ssize_t phx_range_read_iter(struct kiocb *iocb, struct iov_iter *to);
ssize_t phx_range_write_iter(struct kiocb *iocb, struct iov_iter *from);

/* phx_nvidia.c */
int phx_nvidia_init(void);
void phx_nvidia_exit(void);
long phx_nvidia_import(struct phx_dev *phx, struct phx_ioc_import __user *arg);

#endif /* PHX_H */
