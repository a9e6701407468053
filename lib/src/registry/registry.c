/* SPDX-License-Identifier: MIT */
/*
 * registry.c - the device registry: backends probed once, devices opened
 * by name and reference counted, their limits, accounting and statistics.
 * It sits on top: closing a device tears down its streams and engines.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stream.h"

static const struct phx_backend_ops *const backends[PHX_DEVICE_KINDS] = {
	[PHX_DEVICE_CUDA] = &phx_cuda_ops,
	[PHX_DEVICE_SIM] = &phx_sim_ops,
	[PHX_DEVICE_KMOD] = &phx_kmod_ops,
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static int probe_count[PHX_DEVICE_KINDS];
static const char *probe_why[PHX_DEVICE_KINDS];
static bool probed[PHX_DEVICE_KINDS];
#define MAX_DEVICES 64
static struct phx_device *open_devices[PHX_DEVICE_KINDS][MAX_DEVICES];

/* Probe @kind once; returns its device count or -ENODEV. */
static int backend_probe(enum phx_device_kind kind, const char **why)
{
	int n;

	pthread_mutex_lock(&registry_lock);
	if (!probed[kind]) {
		probe_why[kind] = NULL;
		probe_count[kind] = backends[kind]->probe(&probe_why[kind]);
		probed[kind] = true;
	}
	n = probe_count[kind];
	if (why)
		*why = probe_why[kind];
	pthread_mutex_unlock(&registry_lock);
	return n;
}

static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static enum phx_device_kind default_kind;
static const char *default_why;

PHX_EXPORT int phx_kind_parse(const char *name, enum phx_device_kind *out)
{
	if (!name || !*name || !strcmp(name, "auto")) {
		*out = PHX_DEVICE_NONE;
		return 0;
	}
	*out = phx_kind_word(name, strlen(name));
	if (*out == PHX_DEVICE_NONE)
		return phx_err(
			EINVAL,
			"unknown device kind '%s': use cuda, sim, kmod or auto",
			name);
	return 0;
}

static void default_init(void)
{
	static char forced[32];
	const char *s = getenv("PHX_DEVICE");
	const char *why = NULL;

	phx_settings();
	if (phx_kind_parse(s, &default_kind)) {
		default_kind = PHX_DEVICE_NONE;
		default_why = "PHX_DEVICE is not one of cuda, sim, kmod, auto";
		return;
	}
	if (default_kind != PHX_DEVICE_NONE) {
		snprintf(forced, sizeof(forced), "PHX_DEVICE=%s",
			 phx_kind_name(default_kind));
		default_why = forced;
		return;
	}
	if (backend_probe(PHX_DEVICE_CUDA, &why) > 0) {
		default_kind = PHX_DEVICE_CUDA;
		default_why = "a CUDA GPU is usable";
		return;
	}
	default_kind = PHX_DEVICE_SIM;
	default_why = why ? why : "no CUDA GPU";
}

PHX_EXPORT enum phx_device_kind phx_default_kind(const char **why)
{
	pthread_once(&default_once, default_init);
	if (why)
		*why = default_why;
	return default_kind;
}

static int kind_check(enum phx_device_kind *kind)
{
	const char *why;

	if (*kind == PHX_DEVICE_NONE) {
		*kind = phx_default_kind(&why);
		if (*kind == PHX_DEVICE_NONE)
			return phx_err(EINVAL, "cannot pick a device: %s", why);
	}
	if ((unsigned int)*kind >= PHX_DEVICE_KINDS)
		return phx_err(EINVAL, "unknown device kind %d", (int)*kind);
	return 0;
}

static void fill_name(enum phx_device_kind kind, int index, char *name,
		      size_t len)
{
	snprintf(name, len, "%s%d", phx_kind_prefix(kind), index);
}

/* What the backend reports of device @index of @kind. */
static int info_query(enum phx_device_kind kind, int index,
		      struct phx_device_info *info)
{
	memset(info, 0, sizeof(*info));
	info->kind = kind;
	info->index = index;
	info->numa_node = -1;
	fill_name(kind, index, info->name, sizeof(info->name));
	return backends[kind]->query(index, info);
}

/* What libphoenix knows beyond the backend: its use and its limit. */
static void info_adjust(const struct phx_device *dev,
			struct phx_device_info *info)
{
	if (dev->limit && dev->limit < info->capacity)
		info->capacity = dev->limit;
	info->used = atomic_load(&dev->used);
	/* the simulated device has no one else using it */
	if (dev->ops->kind == PHX_DEVICE_SIM)
		info->free = info->capacity > info->used ?
				     info->capacity - info->used :
				     0;
}

PHX_EXPORT int phx_device_list(enum phx_device_kind kind,
			       struct phx_device_info *infos, int max)
{
	const char *why = NULL;
	int n, i, ret;

	ret = kind_check(&kind);
	if (ret)
		return ret;
	n = backend_probe(kind, &why);
	if (n < 0)
		return phx_err(ENODEV, "no %s devices: %s", phx_kind_name(kind),
			       why ? why : "backend unusable");
	for (i = 0; i < n && i < max; i++) {
		struct phx_device *open_dev;

		ret = info_query(kind, i, &infos[i]);
		if (ret)
			return ret;
		pthread_mutex_lock(&registry_lock);
		open_dev = i < MAX_DEVICES ? open_devices[kind][i] : NULL;
		if (open_dev)
			info_adjust(open_dev, &infos[i]);
		pthread_mutex_unlock(&registry_lock);
	}
	phx_err_clear();
	return n;
}

/* Parse "gpu0", "sim1", "phx0", "cuda:0", "sim:1", "kmod:0": kind, index. */
static int parse_name(const char *name, enum phx_device_kind *kind, int *index)
{
	size_t l = 0;
	char *end;
	long v;

	if (!name || !*name) {
		*kind = PHX_DEVICE_NONE;
		*index = 0;
		return 0;
	}
	while (isalpha((unsigned char)name[l]))
		l++;
	*kind = phx_kind_word(name, l);
	if (name[l] == ':')
		l++;
	if (*kind != PHX_DEVICE_NONE && isdigit((unsigned char)name[l])) {
		errno = 0;
		v = strtol(name + l, &end, 10);
		if (!*end && !errno && v >= 0 && v <= INT32_MAX) {
			*index = (int)v;
			return 0;
		}
	}
	return phx_err(EINVAL, "bad device name '%s': use gpuN, simN or phxN",
		       name);
}

PHX_EXPORT int phx_device_open(const char *name, struct phx_device **out)
{
	enum phx_device_kind kind;
	struct phx_device *dev;
	struct phx_device_info info;
	const char *why = NULL;
	int index = 0, n, ret;

	ret = parse_name(name, &kind, &index);
	if (ret)
		return ret;
	ret = kind_check(&kind);
	if (ret)
		return ret;
	n = backend_probe(kind, &why);
	if (n < 0)
		return phx_err(ENODEV, "cannot open %s device %d: %s",
			       phx_kind_name(kind), index,
			       why ? why : "backend unusable");
	if (index >= n || index >= MAX_DEVICES)
		return phx_err(
			ENODEV, "no device %s%d: there are %d %s devices",
			phx_kind_prefix(kind), index, n, phx_kind_name(kind));

	pthread_mutex_lock(&registry_lock);
	dev = open_devices[kind][index];
	if (dev) {
		/* Usable here?  A child forked after a GPU opened is not. */
		ret = phx_device_bind(dev);
		if (!ret)
			dev->refs++;
		pthread_mutex_unlock(&registry_lock);
		if (!ret)
			*out = dev;
		return ret;
	}
	dev = calloc(1, sizeof(*dev));
	if (!dev) {
		pthread_mutex_unlock(&registry_lock);
		return phx_err(ENOMEM, "out of host memory opening a device");
	}
	dev->ops = backends[kind];
	dev->index = index;
	dev->refs = 1;
	fill_name(kind, index, dev->name, sizeof(dev->name));
	ret = dev->ops->open(dev);
	if (!ret) {
		ret = info_query(kind, index, &info);
		dev->capacity = info.capacity;
		dev->numa_node = info.numa_node;
	}
	if (!ret)
		ret = phx_engine_device_open(dev);
	if (!ret)
		ret = phx_stream_device_open(dev);
	if (ret) {
		phx_engine_device_close(dev);
		if (dev->priv)
			dev->ops->close(dev);
		pthread_mutex_unlock(&registry_lock);
		free(dev);
		return ret;
	}
	open_devices[kind][index] = dev;
	pthread_mutex_unlock(&registry_lock);
	*out = dev;
	phx_err_clear();
	return 0;
}

PHX_EXPORT int phx_device_open_dptr(enum phx_device_kind kind, phx_dptr_t dptr,
				    struct phx_device **out)
{
	char name[32];
	int ret, index = 0;

	ret = kind_check(&kind);
	if (ret)
		return ret;
	if (backend_probe(kind, NULL) < 0)
		return phx_err(ENODEV, "no %s devices", phx_kind_name(kind));
	if (backends[kind]->locate) {
		index = backends[kind]->locate(dptr);
		if (index < 0)
			return phx_err(ENODEV,
				       "address 0x%llx is not on any %s device",
				       (unsigned long long)dptr,
				       phx_kind_name(kind));
	}
	fill_name(kind, index, name, sizeof(name));
	return phx_device_open(name, out);
}

PHX_EXPORT void phx_device_close(struct phx_device *dev)
{
	if (!dev)
		return;
	pthread_mutex_lock(&registry_lock);
	if (--dev->refs > 0) {
		pthread_mutex_unlock(&registry_lock);
		return;
	}
	open_devices[dev->ops->kind][dev->index] = NULL;
	pthread_mutex_unlock(&registry_lock);

	/* each layer's state, top down */
	phx_stream_device_close(dev);
	phx_engine_device_close(dev);
	dev->ops->close(dev);
	free(dev);
}

PHX_EXPORT int phx_device_info(struct phx_device *dev,
			       struct phx_device_info *info)
{
	int ret = info_query(dev->ops->kind, dev->index, info);

	if (!ret)
		info_adjust(dev, info);
	return ret;
}

PHX_EXPORT enum phx_device_kind phx_device_kind(const struct phx_device *dev)
{
	return dev->ops->kind;
}

PHX_EXPORT void *phx_device_native(struct phx_device *dev)
{
	return dev->ops->native ? dev->ops->native(dev) : NULL;
}

PHX_EXPORT int phx_device_set_limit(struct phx_device *dev, uint64_t limit)
{
	if (limit && limit < atomic_load(&dev->used))
		return phx_err(EBUSY,
			       "%s: limit below the memory already in use",
			       dev->name);
	dev->limit = limit;
	return 0;
}

PHX_EXPORT void phx_stats_get(struct phx_device *dev, struct phx_stats *out)
{
	unsigned int i;

	memset(out, 0, sizeof(*out));
	for (i = 0; i < sizeof(out->bytes) / sizeof(out->bytes[0]); i++)
		out->bytes[i] = atomic_load(&dev->bytes[i]);
	out->ios = atomic_load(&dev->ios);
	out->errors = atomic_load(&dev->errors);
	out->pinned_bytes = atomic_load(&dev->pinned);
}
