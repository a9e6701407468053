// SPDX-License-Identifier: GPL-2.0
/*
 * phx_nvidia.c - NVIDIA GPU memory, imported as dma-buf, as ZONE_DEVICE pages.
 *
 * With nvidia=1 the module gives the BAR1 aperture of every NVIDIA GPU
 * struct pages (MEMORY_DEVICE_GENERIC, as for its own BARs) and creates a
 * /dev/phxN for each.  A process exports a range of its CUDA memory with
 * cuMemGetHandleForAddressRange(CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD) and
 * passes the dma-buf to PHX_IOC_IMPORT.  The module attaches to it as a
 * peer-to-peer importer on behalf of the GPU, pins and maps it: the DMA
 * addresses the exporter returns are BAR1 bus addresses, which name the
 * module's pages of that BAR.  Those pages become a range file like any
 * other, so O_DIRECT I/O into its mapping is DMA into GPU memory.
 *
 * What it needs and does not do: the IOMMU must be off or in passthrough
 * (a translated address names no page), the BAR1 must be large enough to
 * map the allocation (resizable BAR), and nothing here copies data.  The
 * machines this was written on have no NVIDIA GPU: it is compiled, not run.
 */
#include <linux/dma-buf.h>
#include <linux/dma-resv.h>
#include <linux/file.h>
#include <linux/module.h>
#include <linux/slab.h>

#include "phx.h"

#define PHX_NVIDIA_BAR 1

static bool nvidia;
module_param(nvidia, bool, 0444);
MODULE_PARM_DESC(nvidia,
		 "map the BAR1 of NVIDIA GPUs and accept dma-buf imports");

/**
 * struct phx_import - what a range made from a dma-buf holds.
 * @dmabuf: the imported buffer (a reference is held).
 * @attach: the module's attachment, pinned.
 * @sgt: the mapping of @attach.
 */
struct phx_import {
	struct dma_buf *dmabuf;
	struct dma_buf_attachment *attach;
	struct sg_table *sgt;
};

/**
 * struct phx_nvidia_gpu - one GPU whose BAR1 has pages.
 * @node: in phx_nvidia_gpus.
 * @phx: its device.
 */
struct phx_nvidia_gpu {
	struct list_head node;
	struct phx_dev *phx;
};

static LIST_HEAD(phx_nvidia_gpus);

static void phx_import_undo(struct phx_import *imp)
{
	if (imp->sgt)
		dma_buf_unmap_attachment_unlocked(imp->attach, imp->sgt,
						  DMA_BIDIRECTIONAL);
	if (imp->attach) {
		dma_resv_lock(imp->dmabuf->resv, NULL);
		dma_buf_unpin(imp->attach);
		dma_resv_unlock(imp->dmabuf->resv);
		dma_buf_detach(imp->dmabuf, imp->attach);
	}
	dma_buf_put(imp->dmabuf);
	kfree(imp);
}

static void phx_import_release(struct phx_range *range)
{
	phx_import_undo(range->priv);
}

static const struct phx_range_ops phx_import_range_ops = {
	.release = phx_import_release,
};

/*
 * A pinned attachment is not supposed to move; an exporter that moves it
 * anyway takes the memory away from every mapping of the range.
 */
static void phx_import_move_notify(struct dma_buf_attachment *attach)
{
	struct phx_range *range = attach->importer_priv;

	down_write(&range->phx->lock);
	range->revoked = true;
	up_write(&range->phx->lock);
	if (range->inode)
		phx_range_zap(range);
}

static const struct dma_buf_attach_ops phx_import_attach_ops = {
	.allow_peer2peer = true,
	.move_notify = phx_import_move_notify,
};

/* Turn the exporter's BAR1 bus addresses into the module's pages. */
static int phx_import_pages(struct phx_dev *phx, struct phx_range *range,
			    struct sg_table *sgt)
{
	struct scatterlist *sg;
	unsigned long n = 0;
	unsigned int i;

	for_each_sgtable_dma_sg(sgt, sg, i) {
		dma_addr_t addr = sg_dma_address(sg);
		unsigned int len = sg_dma_len(sg);
		unsigned long pfn, k;

		if (!PAGE_ALIGNED(addr) || !PAGE_ALIGNED(len) ||
		    addr < phx->bus || len > phx->size ||
		    addr - phx->bus > phx->size - len)
			return -EREMOTEIO;
		if (len >> PAGE_SHIFT > range->nr_pages - n)
			return -EINVAL;
		pfn = PHYS_PFN(phx->phys + (addr - phx->bus));
		for (k = 0; k < len >> PAGE_SHIFT; k++)
			range->pages[n++] = pfn_to_page(pfn + k);
	}
	if (n != range->nr_pages)
		return -EINVAL;
	return 0;
}

static bool phx_pages_contiguous(const struct phx_range *range)
{
	unsigned long i;

	for (i = 1; i < range->nr_pages; i++)
		if (range->pages[i] != range->pages[0] + i)
			return false;
	return true;
}

static struct phx_range *phx_import(struct phx_dev *phx, int dmabuf_fd)
{
	struct phx_range *range;
	struct phx_import *imp;
	struct dma_buf *dmabuf;
	int ret;

	dmabuf = dma_buf_get(dmabuf_fd);
	if (IS_ERR(dmabuf))
		return ERR_CAST(dmabuf);
	if (!dmabuf->size || !PAGE_ALIGNED(dmabuf->size)) {
		dma_buf_put(dmabuf);
		return ERR_PTR(-EINVAL);
	}
	imp = kzalloc(sizeof(*imp), GFP_KERNEL);
	if (!imp) {
		dma_buf_put(dmabuf);
		return ERR_PTR(-ENOMEM);
	}
	imp->dmabuf = dmabuf;

	range = phx_range_create(phx, dmabuf->size >> PAGE_SHIFT,
				 &phx_import_range_ops);
	if (!range) {
		ret = -ENOMEM;
		goto err_imp;
	}
	range->priv = imp;
	/* Until the import is complete, undo it here, not in release. */
	range->released = true;

	imp->attach = dma_buf_dynamic_attach(dmabuf, &phx->pdev->dev,
					     &phx_import_attach_ops, range);
	if (IS_ERR(imp->attach)) {
		ret = PTR_ERR(imp->attach);
		imp->attach = NULL;
		goto err_range;
	}
	dma_resv_lock(dmabuf->resv, NULL);
	ret = dma_buf_pin(imp->attach);
	dma_resv_unlock(dmabuf->resv);
	if (ret) {
		dma_buf_detach(dmabuf, imp->attach);
		imp->attach = NULL;
		goto err_range;
	}
	imp->sgt = dma_buf_map_attachment_unlocked(imp->attach,
						   DMA_BIDIRECTIONAL);
	if (IS_ERR(imp->sgt)) {
		ret = PTR_ERR(imp->sgt);
		imp->sgt = NULL;
		goto err_range;
	}
	ret = phx_import_pages(phx, range, imp->sgt);
	if (ret)
		goto err_range;

	range->offset = page_to_phys(range->pages[0]) - phx->phys;
	range->contiguous = phx_pages_contiguous(range);
	range->released = false;
	phx_range_track(range);
	return range;

err_range:
	/*
	 * The attachment names the range (move_notify's importer_priv):
	 * detached first, so no move_notify can come for a freed range.
	 */
	phx_import_undo(imp);
	phx_range_destroy(range);
	return ERR_PTR(ret);
err_imp:
	phx_import_undo(imp);
	return ERR_PTR(ret);
}

/**
 * phx_nvidia_import() - PHX_IOC_IMPORT: a range file for a GPU's dma-buf.
 * @phx: a device of provider PHX_PROVIDER_NVIDIA.
 * @uarg: struct phx_ioc_import from userspace.
 *
 * Return: 0 with the new descriptor in @uarg->fd, or a negative errno:
 * -EOPNOTSUPP on other devices, -EREMOTEIO when the dma-buf is not in
 * this GPU's BAR1 (another device, system memory, or an IOMMU in the way).
 */
long phx_nvidia_import(struct phx_dev *phx, struct phx_ioc_import __user *uarg)
{
	struct phx_ioc_import arg;
	struct phx_range *range;

	if (copy_from_user(&arg, uarg, sizeof(arg)))
		return -EFAULT;
	if (arg.reserved[0] || arg.reserved[1])
		return -EINVAL;
	if (phx->provider != PHX_PROVIDER_NVIDIA)
		return -EOPNOTSUPP;

	/*
	 * Not under @phx->lock: the exporter calls move_notify, which takes
	 * it, with the reservation lock held (lock order: dma_resv, then
	 * @phx->lock).  GPU devices die only at module unload, when no
	 * ioctl can be running.
	 */
	if (READ_ONCE(phx->dead))
		return -ENODEV;
	range = phx_import(phx, arg.dmabuf_fd);
	if (IS_ERR(range))
		return PTR_ERR(range);

	arg.size = phx_range_size(range);
	arg.offset = range->offset;
	return phx_range_install(range, uarg, &arg, sizeof(arg), &arg.fd);
}

static int phx_nvidia_add(struct pci_dev *pdev)
{
	struct phx_nvidia_gpu *gpu;
	struct phx_dev *phx;
	void *addr;
	int ret;

	gpu = kzalloc(sizeof(*gpu), GFP_KERNEL);
	if (!gpu)
		return -ENOMEM;
	phx = phx_dev_create(pdev, PHX_PROVIDER_NVIDIA, PHX_NVIDIA_BAR);
	if (IS_ERR(phx)) {
		kfree(gpu);
		return PTR_ERR(phx);
	}
	if (!IS_ALIGNED(phx->phys, SZ_2M) || !IS_ALIGNED(phx->size, SZ_2M)) {
		ret = -EINVAL;
		goto err_put;
	}
	/* The GPU belongs to its own driver: no devres on its device. */
	phx->pgmap.type = MEMORY_DEVICE_GENERIC;
	phx->pgmap.range.start = phx->phys;
	phx->pgmap.range.end = phx->phys + phx->size - 1;
	phx->pgmap.nr_range = 1;
	addr = memremap_pages(&phx->pgmap, dev_to_node(&pdev->dev));
	if (IS_ERR(addr)) {
		ret = PTR_ERR(addr);
		goto err_put;
	}
	ret = phx_dev_publish(phx);
	if (ret)
		goto err_unmap;
	gpu->phx = phx;
	list_add_tail(&gpu->node, &phx_nvidia_gpus);
	return 0;

err_unmap:
	memunmap_pages(&phx->pgmap);
err_put:
	dev_err(&pdev->dev, "phx: cannot map BAR1 of this GPU: %d\n", ret);
	phx_dev_put(phx);
	kfree(gpu);
	return ret;
}

/**
 * phx_nvidia_init() - create a device for each NVIDIA GPU when asked to.
 *
 * A GPU that cannot be mapped is reported and skipped.
 *
 * Return: 0 (also when there is no GPU or the parameter is off).
 */
int phx_nvidia_init(void)
{
	struct pci_dev *pdev = NULL;

	if (!nvidia)
		return 0;
	while ((pdev = pci_get_device(PCI_VENDOR_ID_NVIDIA, PCI_ANY_ID,
				      pdev))) {
		if ((pdev->class >> 16) != PCI_BASE_CLASS_DISPLAY)
			continue;
		phx_nvidia_add(pdev);
	}
	return 0;
}

/**
 * phx_nvidia_exit() - remove the GPU devices; waits for pinned pages.
 */
void phx_nvidia_exit(void)
{
	struct phx_nvidia_gpu *gpu, *tmp;

	list_for_each_entry_safe(gpu, tmp, &phx_nvidia_gpus, node) {
		phx_dev_kill(gpu->phx);
		memunmap_pages(&gpu->phx->pgmap);
		phx_dev_put(gpu->phx);
		list_del(&gpu->node);
		kfree(gpu);
	}
}

MODULE_IMPORT_NS(DMA_BUF);
