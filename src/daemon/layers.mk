# SPDX-License-Identifier: Apache-2.0
# The daemon's layers: one folder each (CONTRIBUTING.md, "Layers"). A source
# or header in src/daemon/L may include, besides its own folder, src/common and
# include/, only the headers of the folders LAYER_USES_L names. The build gives
# each folder only those include paths, and scripts/check-layers.py (run by
# `make check-layers`, part of `make test`) names any include that breaks the
# rule. Upward is never allowed: nothing below api/ includes an api header.
# A name ending in /* stands for every folder there: vmm/* is each VMM backend
# (vmm/qemu, vmm/firecracker, and one added later without a line here), and
# LAYER_USES_vmm/* is what each may use (no backend another's).
#
#   main             airlockd's main and its config file: wires everything
#   api              HTTP server, routes, request parsers, one handler file per resource
#   build            template builds and imports: the Dockerfile parser, the build context, the builder
#   cluster          cluster mode: the node's lease and index rows in PostgreSQL, fencing, moves
#                    of a sandbox through the shared snapshot store (pause, adopt)
#   core             the sandbox registry and its state machine, processes, template snapshots
#   vmm              the neutral VMM seam: ops, selection, accelerator, jail, start helpers
#   vmm/*            one VMM backend each: vmm/qemu (and its QMP client),
#                    vmm/firecracker (its API client, the hybrid vsock)
#   guest            the host end of the agent's channel, the CA given to guests
#   net              network namespaces, the egress gateway's supervisor, policies
#   store            SQLite: sandboxes, snapshots, tenants and tokens, secrets, events, the CA's files
#   obs              the log and the metrics registry
#   model            request and record types every layer shares (no code but predicates)
DAEMON_LAYERS := main api build cluster core vmm vmm/* guest net store obs model
LAYER_USES_main := api build cluster core vmm guest net store obs model
LAYER_USES_api := build cluster core vmm guest net store obs model
LAYER_USES_cluster := core vmm guest net store obs model
LAYER_USES_core := vmm guest net store obs model
LAYER_USES_build := core vmm guest net store obs model
LAYER_USES_vmm := obs model
LAYER_USES_vmm/* := vmm obs model
LAYER_USES_guest := store obs model
LAYER_USES_net := store obs model
LAYER_USES_store := obs model
LAYER_USES_obs :=
LAYER_USES_model :=
