# SPDX-License-Identifier: Apache-2.0
# Guest images (scripts in images/, outputs in $(BUILD)/images, downloads in
# $(BUILD)/cache). See docs/guest.md.
#   make images       kernel (bzImage, and the ELF vmlinux Firecracker boots) +
#                     initramfs + the minimal template (most tests)
#   make images-base  the Debian base template (root, network to the archive, ~35 s)
#   make images-all   both
# Each output is rebuilt only when its inputs change: the scripts, the agent,
# busybox, and the kernel ABI (asked of apt-cache on every run; the kernel
# files are rewritten only when it changed).

IMAGES_OUT := $(BUILD)/images
IMAGES_CACHE := $(BUILD)/cache
IMAGES_KERNEL := $(IMAGES_OUT)/kernels
IMAGES_TEMPLATES := $(IMAGES_OUT)/templates

.PHONY: images images-base images-all images-kernel images-clean images-always

images: $(IMAGES_KERNEL)/vmlinuz $(IMAGES_KERNEL)/vmlinux $(IMAGES_KERNEL)/initramfs.cpio \
	$(IMAGES_TEMPLATES)/minimal/rootfs.ext4
images-base: $(IMAGES_TEMPLATES)/base/rootfs.ext4
images-all: images images-base
images-kernel: $(IMAGES_KERNEL)/vmlinuz $(IMAGES_KERNEL)/vmlinux

$(IMAGES_KERNEL)/vmlinuz $(IMAGES_KERNEL)/kernel-abi &: images/build-kernel.sh images-always
	images/build-kernel.sh $(IMAGES_KERNEL) $(IMAGES_CACHE)

# Firecracker boots an uncompressed ELF: the same kernel, its compression
# undone (the boot protocol's header says where the payload is; the result
# is checked to be x86-64 ELF with the bzImage's version string).
$(IMAGES_KERNEL)/vmlinux: $(IMAGES_KERNEL)/vmlinuz images/extract-vmlinux
	images/extract-vmlinux $< $@

$(IMAGES_KERNEL)/initramfs.cpio: $(BUILD)/airlock-agent $(IMAGES_KERNEL)/kernel-abi images/build-initramfs.sh
	images/build-initramfs.sh $(BUILD)/airlock-agent $(IMAGES_CACHE) "$$(cat $(IMAGES_KERNEL)/kernel-abi)" $@

$(IMAGES_TEMPLATES)/minimal/rootfs.ext4: images/build-minimal.sh images/minimal-wget.sh $(wildcard /bin/busybox)
	images/build-minimal.sh $(dir $@)

$(IMAGES_TEMPLATES)/base/rootfs.ext4: images/build-base.sh
	images/build-base.sh $(dir $@)

images-clean:
	rm -rf $(IMAGES_OUT)
