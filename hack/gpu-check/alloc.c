// gpu-alloc: create a CUDA context on device 0 and allocate MiB of device
// memory, through libcuda.so.1 loaded at run time (no CUDA toolkit needed).
// Usage: gpu-alloc <MiB> [hold-seconds]. Exit 0: allocated; 2: the context
// could not be created; 3: the allocation failed; 1: libcuda missing.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*cuInit_t)(unsigned);
typedef int (*cuDeviceGet_t)(int *, int);
typedef int (*cuCtxCreate_t)(void **, unsigned, int);
typedef int (*cuMemAlloc_t)(unsigned long long *, size_t);

int main(int argc, char **argv) {
	if (argc < 2) {
		fprintf(stderr, "usage: gpu-alloc <MiB> [hold-seconds]\n");
		return 64;
	}
	size_t mib = strtoull(argv[1], 0, 10);
	int hold = argc > 2 ? atoi(argv[2]) : 0;
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
		return 1;
	}
	cuInit_t cuInit = (cuInit_t)dlsym(h, "cuInit");
	cuDeviceGet_t cuDeviceGet = (cuDeviceGet_t)dlsym(h, "cuDeviceGet");
	cuCtxCreate_t cuCtxCreate = (cuCtxCreate_t)dlsym(h, "cuCtxCreate_v2");
	cuMemAlloc_t cuMemAlloc = (cuMemAlloc_t)dlsym(h, "cuMemAlloc_v2");
	int dev, r;
	void *ctx;
	if ((r = cuInit(0)) != 0 || (r = cuDeviceGet(&dev, 0)) != 0 || (r = cuCtxCreate(&ctx, 0, dev)) != 0) {
		printf("context: CUDA error %d\n", r);
		return 2;
	}
	unsigned long long ptr;
	if ((r = cuMemAlloc(&ptr, mib << 20)) != 0) {
		printf("alloc %zu MiB: CUDA error %d\n", mib, r);
		return 3;
	}
	printf("alloc %zu MiB: ok (pid %d)\n", mib, getpid());
	fflush(stdout);
	if (hold > 0)
		sleep(hold);
	return 0;
}
