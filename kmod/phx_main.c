// SPDX-License-Identifier: GPL-2.0
/*
 * phx_main.c - phx.ko: device memory (a PCI BAR) as ZONE_DEVICE pages.
 *
 * The module binds to a PCI device whose BAR is memory (QEMU's ivshmem by
 * default, others through the "ids" parameter), gives that BAR struct
 * pages with devm_memremap_pages() (MEMORY_DEVICE_GENERIC; on kernels with
 * CONFIG_PCI_P2PDMA the BAR is registered as a P2PDMA provider instead) and
 * exposes it as /dev/phxN.  PHX_IOC_ALLOC carves a range out of the BAR and
 * returns it as a regular file (phx_range.c); mapping that file and doing
 * O_DIRECT I/O into the mapping makes the disk controller DMA straight into
 * the BAR.  GPU memory is reached through dma-buf import (phx_nvidia.c).
 *
 * What it does not do: it never copies data itself on the I/O path, never
 * lets a mapping outlive the device's pages (unbind zaps every mapping and
 * waits for pinned pages), and manages no memory it did not map.
 */
#include <linux/delay.h>
#include <linux/file.h>
#include <linux/genalloc.h>
#include <linux/highmem.h>
#include <linux/idr.h>
#include <linux/module.h>
#include <linux/pci-p2pdma.h>
#include <linux/slab.h>

#include "phx.h"

#define PHX_IVSHMEM_BAR 2

static char *ids;
module_param(ids, charp, 0444);
MODULE_PARM_DESC(ids, "more devices: vendor:device:bar[,...] (hex:hex:dec)");

static DEFINE_IDA(phx_ida);

static void phx_dev_release(struct kref *kref)
{
	struct phx_dev *phx = container_of(kref, struct phx_dev, kref);

	if (phx->pool)
		gen_pool_destroy(phx->pool);
	ida_free(&phx_ida, phx->index);
	pci_dev_put(phx->pdev);
	kfree(phx);
}

/**
 * phx_dev_put() - drop a reference to a device.
 * @phx: the device.
 */
void phx_dev_put(struct phx_dev *phx)
{
	kref_put(&phx->kref, phx_dev_release);
}

static void phx_reap_work(struct work_struct *work)
{
	struct phx_dev *phx = container_of(to_delayed_work(work),
					   struct phx_dev, reap_work);

	phx_dev_reap(phx);
}

/**
 * phx_dev_create() - the common part of a device, before its pages exist.
 * @pdev: the PCI device; a reference is taken.
 * @provider: enum phx_provider.
 * @bar: the BAR that holds the memory.
 *
 * Return: the device with one reference, or an ERR_PTR.
 */
struct phx_dev *phx_dev_create(struct pci_dev *pdev, enum phx_provider provider,
			       int bar)
{
	struct phx_dev *phx;
	int index;

	phx = kzalloc(sizeof(*phx), GFP_KERNEL);
	if (!phx)
		return ERR_PTR(-ENOMEM);
	index = ida_alloc(&phx_ida, GFP_KERNEL);
	if (index < 0) {
		kfree(phx);
		return ERR_PTR(index);
	}
	kref_init(&phx->kref);
	phx->pdev = pci_dev_get(pdev);
	phx->provider = provider;
	phx->bar = bar;
	phx->index = index;
	snprintf(phx->name, sizeof(phx->name), "phx%d", index);
	phx->phys = pci_resource_start(pdev, bar);
	phx->bus = pci_bus_address(pdev, bar);
	phx->size = pci_resource_len(pdev, bar);
	init_rwsem(&phx->lock);
	mutex_init(&phx->ranges_lock);
	INIT_LIST_HEAD(&phx->ranges);
	INIT_LIST_HEAD(&phx->pending);
	INIT_DELAYED_WORK(&phx->reap_work, phx_reap_work);
	atomic64_set(&phx->allocated, 0);
	return phx;
}

static int phx_dev_open(struct inode *inode, struct file *file)
{
	struct phx_dev *phx = container_of(file->private_data, struct phx_dev,
					   misc);

	/* misc_deregister() waits for misc_open(), so @phx is alive here. */
	kref_get(&phx->kref);
	file->private_data = phx;
	return 0;
}

static int phx_dev_file_release(struct inode *inode, struct file *file)
{
	phx_dev_put(file->private_data);
	return 0;
}

static long phx_ioctl_info(struct phx_dev *phx, void __user *uarg)
{
	struct phx_ioc_info info = {};

	info.provider = phx->provider;
	info.page_size = PAGE_SIZE;
	info.size = phx->size;
	info.free = phx->size - atomic64_read(&phx->allocated);
	info.bus_addr = phx->bus;
	strscpy(info.pci_name, pci_name(phx->pdev), sizeof(info.pci_name));
	if (copy_to_user(uarg, &info, sizeof(info)))
		return -EFAULT;
	return 0;
}

static void phx_bar_release(struct phx_range *range)
{
	struct phx_dev *phx = range->phx;
	u64 size = phx_range_size(range);

#ifdef CONFIG_PCI_P2PDMA
	unsigned long i;

	/* Free P2PDMA pages idle at zero references. */
	for (i = 0; i < range->nr_pages; i++)
		set_page_count(range->pages[i], 0);
	pci_free_p2pmem(phx->pdev, page_address(range->pages[0]), size);
#else
	gen_pool_free(phx->pool, phx->phys + range->offset, size);
#endif
	atomic64_sub(size, &phx->allocated);
}

/* Give back the pages of @range from @keep on; they are neither mapped
 * nor pinned.  The range keeps its first @keep pages. */
static int phx_bar_trim(struct phx_range *range, unsigned long keep)
{
#ifdef CONFIG_PCI_P2PDMA
	lockdep_assert_held_write(&range->phx->lock);
	/* pci_free_p2pmem() drops one reference per call: no partial frees. */
	return -EOPNOTSUPP;
#else
	struct phx_dev *phx = range->phx;
	u64 size = (u64)(range->nr_pages - keep) << PAGE_SHIFT;

	lockdep_assert_held_write(&phx->lock);
	gen_pool_free(phx->pool,
		      phx->phys + range->offset + ((u64)keep << PAGE_SHIFT),
		      size);
	atomic64_sub(size, &phx->allocated);
	return 0;
#endif
}

static const struct phx_range_ops phx_bar_range_ops = {
	.release = phx_bar_release,
	.trim = phx_bar_trim,
};

/* Take @size bytes of the BAR; returns the offset in it or -errno. */
static s64 phx_bar_take(struct phx_dev *phx, const struct phx_ioc_alloc *arg)
{
#ifdef CONFIG_PCI_P2PDMA
	void *addr;

	lockdep_assert_held(&phx->lock);
	/* The P2PDMA allocator has no placement control. */
	if (arg->flags & PHX_ALLOC_FIXED)
		return -EOPNOTSUPP;
	addr = pci_alloc_p2pmem(phx->pdev, arg->size);
	if (!addr)
		return -ENOSPC;
	return virt_to_phys(addr) - phx->phys;
#else
	struct genpool_data_fixed fixed = { .offset = arg->offset };
	unsigned long addr;

	lockdep_assert_held(&phx->lock);
	if (arg->flags & PHX_ALLOC_FIXED) {
		addr = gen_pool_alloc_algo(phx->pool, arg->size,
					   gen_pool_fixed_alloc, &fixed);
		if (!addr)
			return -EBUSY;
	} else {
		addr = gen_pool_alloc(phx->pool, arg->size);
		if (!addr)
			return -ENOSPC;
	}
	return addr - phx->phys;
#endif
}

static struct phx_range *phx_bar_alloc(struct phx_dev *phx,
				       struct phx_ioc_alloc *arg)
{
	unsigned long nr_pages = arg->size >> PAGE_SHIFT;
	struct phx_range *range;
	struct page *first;
	unsigned long i;
	s64 offset;

	range = phx_range_create(phx, nr_pages, &phx_bar_range_ops);
	if (!range)
		return ERR_PTR(-ENOMEM);
	/*
	 * Nothing to give back until the memory is taken.  The range is on
	 * the device's list before: once the memory is taken, an unbind
	 * that comes before the range has its file gives it back.
	 */
	range->released = true;
	phx_range_track(range);

	down_read(&phx->lock);
	if (phx->dead) {
		offset = -ENODEV;
		goto out_unlock;
	}
	offset = phx_bar_take(phx, arg);
	if (offset < 0)
		goto out_unlock;
	atomic64_add(arg->size, &phx->allocated);
	range->released = false;
	range->offset = offset;
	range->contiguous = true;

	first = pfn_to_page(PHYS_PFN(phx->phys + offset));
	for (i = 0; i < nr_pages; i++) {
		range->pages[i] = first + i;
#ifdef CONFIG_PCI_P2PDMA
		set_page_count(range->pages[i], 1);
#endif
		if (!(arg->flags & PHX_ALLOC_NOCLEAR))
			clear_highpage(range->pages[i]);
		if (!(i & 255))
			cond_resched();
	}
out_unlock:
	up_read(&phx->lock);
	if (offset < 0) {
		phx_range_destroy(range);
		return ERR_PTR(offset);
	}
	arg->offset = offset;
	return range;
}

static long phx_ioctl_alloc(struct phx_dev *phx,
			    struct phx_ioc_alloc __user *uarg)
{
	struct phx_ioc_alloc arg;
	struct phx_range *range;

	if (copy_from_user(&arg, uarg, sizeof(arg)))
		return -EFAULT;
	if (arg.flags &
		    ~(PHX_ALLOC_FIXED | PHX_ALLOC_NOCLEAR | PHX_ALLOC_GROW) ||
	    arg.reserved[0] || arg.reserved[1])
		return -EINVAL;
	if (!arg.size || !PAGE_ALIGNED(arg.size))
		return -EINVAL;
	if (arg.flags & PHX_ALLOC_FIXED) {
		if (!PAGE_ALIGNED(arg.offset))
			return -EINVAL;
		if (arg.offset >= phx->size ||
		    arg.size > phx->size - arg.offset)
			return -ERANGE;
	} else if (arg.size > phx->size) {
		return -ENOSPC;
	}
	if ((arg.flags & PHX_ALLOC_NOCLEAR) && !capable(CAP_SYS_ADMIN))
		return -EPERM;
	if (phx->provider != PHX_PROVIDER_BAR)
		return -EOPNOTSUPP;

	range = phx_bar_alloc(phx, &arg);
	if (IS_ERR(range))
		return PTR_ERR(range);
	range->grow = arg.flags & PHX_ALLOC_GROW;
	return phx_range_install(range, uarg, &arg, sizeof(arg), &arg.fd);
}

static long phx_dev_ioctl(struct file *file, unsigned int cmd,
			  unsigned long arg)
{
	struct phx_dev *phx = file->private_data;
	void __user *uarg = (void __user *)arg;

	switch (cmd) {
	case PHX_IOC_INFO:
		return phx_ioctl_info(phx, uarg);
	case PHX_IOC_ALLOC:
		return phx_ioctl_alloc(phx, uarg);
	case PHX_IOC_IMPORT:
		return phx_nvidia_import(phx, uarg);
	default:
		return -ENOTTY;
	}
}

static const struct file_operations phx_dev_fops = {
	.owner = THIS_MODULE,
	.open = phx_dev_open,
	.release = phx_dev_file_release,
	.unlocked_ioctl = phx_dev_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.llseek = noop_llseek,
};

/**
 * phx_dev_publish() - create /dev/phxN once the pages exist.
 * @phx: the device.
 *
 * Return: 0 or a negative errno.
 */
int phx_dev_publish(struct phx_dev *phx)
{
	int ret;

	phx->misc.minor = MISC_DYNAMIC_MINOR;
	phx->misc.name = phx->name;
	phx->misc.fops = &phx_dev_fops;
	phx->misc.parent = &phx->pdev->dev;
	phx->misc.mode = 0600;
	ret = misc_register(&phx->misc);
	if (ret)
		return ret;
	phx->published = true;
	dev_info(&phx->pdev->dev, "%s: %pa bytes at %pa (bus %#llx)\n",
		 phx->name, &phx->size, &phx->phys, (u64)phx->bus);
	return 0;
}

static bool phx_dev_pinned(struct phx_dev *phx)
{
	struct phx_range *range;
	bool pinned = false;

	mutex_lock(&phx->ranges_lock);
	list_for_each_entry(range, &phx->ranges, node)
		pinned |= !range->released && phx_range_pinned(range);
	list_for_each_entry(range, &phx->pending, node)
		pinned |= phx_range_pinned(range);
	mutex_unlock(&phx->ranges_lock);
	return pinned;
}

/**
 * phx_dev_kill() - take the pages away from userspace before they go.
 * @phx: the device.
 *
 * Removes /dev/phxN, refuses new access, zaps every mapping of every
 * range, waits until I/O in flight has unpinned the pages and gives all
 * memory back.  Open range files stay valid but fail with -ENODEV, and
 * touching an old mapping raises SIGBUS.  May sleep for as long as I/O on
 * the pages takes.
 */
void phx_dev_kill(struct phx_dev *phx)
{
	struct phx_range *range, *tmp;
	unsigned int waited = 0;
	LIST_HEAD(done);

	if (phx->published)
		misc_deregister(&phx->misc);

	down_write(&phx->lock);
	phx->dead = true;
	up_write(&phx->lock);

	/* A range whose file is not made yet has no mapping. */
	mutex_lock(&phx->ranges_lock);
	list_for_each_entry(range, &phx->ranges, node)
		if (range->inode)
			phx_range_zap(range);
	mutex_unlock(&phx->ranges_lock);

	while (phx_dev_pinned(phx)) {
		if (++waited % 500 == 0)
			dev_warn(&phx->pdev->dev,
				 "%s: waiting for I/O to unpin device pages\n",
				 phx->name);
		msleep(20);
	}

	mutex_lock(&phx->ranges_lock);
	list_for_each_entry(range, &phx->ranges, node) {
		if (!range->released) {
			range->ops->release(range);
			range->released = true;
		}
	}
	list_splice_init(&phx->pending, &done);
	mutex_unlock(&phx->ranges_lock);
	cancel_delayed_work_sync(&phx->reap_work);

	list_for_each_entry_safe(range, tmp, &done, node) {
		list_del_init(&range->node);
		phx_range_destroy(range);
	}
}

static void phx_dev_put_action(void *data)
{
	phx_dev_put(data);
}

/* Give the BAR struct pages; torn down by devres after phx_remove(). */
#ifdef CONFIG_PCI_P2PDMA
static int phx_bar_map(struct phx_dev *phx)
{
	int ret;

	ret = pci_p2pdma_add_resource(phx->pdev, phx->bar, 0, 0);
	if (ret)
		return ret;
	/* Ranges go to whoever opens /dev/phxN, not to in-kernel users. */
	pci_p2pmem_publish(phx->pdev, false);
	return 0;
}
#else
static int phx_bar_map(struct phx_dev *phx)
{
	struct device *dev = &phx->pdev->dev;
	void *addr;

	phx->pgmap.type = MEMORY_DEVICE_GENERIC;
	phx->pgmap.range.start = phx->phys;
	phx->pgmap.range.end = phx->phys + phx->size - 1;
	phx->pgmap.nr_range = 1;
	addr = devm_memremap_pages(dev, &phx->pgmap);
	if (IS_ERR(addr))
		return PTR_ERR(addr);

	phx->pool = gen_pool_create(PAGE_SHIFT, dev_to_node(dev));
	if (!phx->pool)
		return -ENOMEM;
	return gen_pool_add(phx->pool, phx->phys, phx->size, dev_to_node(dev));
}
#endif

static int phx_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	int bar = id->driver_data;
	struct phx_dev *phx;
	resource_size_t start, len;
	int ret;

	if (bar < 0 || bar >= PCI_STD_NUM_BARS ||
	    !(pci_resource_flags(pdev, bar) & IORESOURCE_MEM)) {
		dev_err(&pdev->dev, "BAR%d is not a memory BAR\n", bar);
		return -ENODEV;
	}
	start = pci_resource_start(pdev, bar);
	len = pci_resource_len(pdev, bar);
	/* Memory hotplug works in subsections of 2 MiB. */
	if (!IS_ALIGNED(start, SZ_2M) || !IS_ALIGNED(len, SZ_2M)) {
		dev_err(&pdev->dev,
			"BAR%d (%pa, %pa bytes) is not 2 MiB aligned\n", bar,
			&start, &len);
		return -EINVAL;
	}

	ret = pcim_enable_device(pdev);
	if (ret)
		return ret;
	ret = pcim_request_region(pdev, bar, KBUILD_MODNAME);
	if (ret)
		return ret;

	phx = phx_dev_create(pdev, PHX_PROVIDER_BAR, bar);
	if (IS_ERR(phx))
		return PTR_ERR(phx);
	/* Registered first, so released last: after the pages are gone. */
	ret = devm_add_action_or_reset(&pdev->dev, phx_dev_put_action, phx);
	if (ret)
		return ret;

	ret = phx_bar_map(phx);
	if (ret) {
		dev_err(&pdev->dev, "cannot create pages for BAR%d: %d\n", bar,
			ret);
		return ret;
	}
	pci_set_drvdata(pdev, phx);
	return phx_dev_publish(phx);
}

static void phx_remove(struct pci_dev *pdev)
{
	phx_dev_kill(pci_get_drvdata(pdev));
}

static const struct pci_device_id phx_pci_ids[] = {
	/* QEMU ivshmem-plain: shared memory in BAR2 */
	{ PCI_DEVICE(PCI_VENDOR_ID_REDHAT_QUMRANET, 0x1110),
	  .driver_data = PHX_IVSHMEM_BAR },
	{}
};
MODULE_DEVICE_TABLE(pci, phx_pci_ids);

static struct pci_driver phx_pci_driver = {
	.name = KBUILD_MODNAME,
	.id_table = phx_pci_ids,
	.probe = phx_probe,
	.remove = phx_remove,
};

static int phx_add_ids(void)
{
	char *list, *cur, *tok;
	int ret = 0;

	if (!ids || !*ids)
		return 0;
	list = kstrdup(ids, GFP_KERNEL);
	if (!list)
		return -ENOMEM;
	cur = list;
	while ((tok = strsep(&cur, ",")) != NULL) {
		unsigned int vendor, device;
		int bar;

		if (sscanf(tok, "%x:%x:%d", &vendor, &device, &bar) != 3 ||
		    vendor > 0xffff || device > 0xffff || bar < 0 ||
		    bar >= PCI_STD_NUM_BARS) {
			pr_err("phx: ids: \"%s\" is not vendor:device:bar\n",
			       tok);
			ret = -EINVAL;
			break;
		}
		ret = pci_add_dynid(&phx_pci_driver, vendor, device,
				    PCI_ANY_ID, PCI_ANY_ID, 0, 0, bar);
		if (ret)
			break;
	}
	kfree(list);
	return ret;
}

static int __init phx_init(void)
{
	int ret;

	ret = pci_register_driver(&phx_pci_driver);
	if (ret)
		return ret;
	ret = phx_add_ids();
	if (ret)
		goto err_pci;
	ret = phx_nvidia_init();
	if (ret)
		goto err_pci;
	return 0;

err_pci:
	pci_unregister_driver(&phx_pci_driver);
	return ret;
}

static void __exit phx_exit(void)
{
	phx_nvidia_exit();
	pci_unregister_driver(&phx_pci_driver);
}

module_init(phx_init);
module_exit(phx_exit);

MODULE_DESCRIPTION("Device memory as ZONE_DEVICE pages for peer-to-peer I/O");
MODULE_LICENSE("GPL");
