#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpus of fuzz-fc-response (Firecracker API answers).

The seeds are committed; run this again only to change them. Each seed is
also a regression test: `make fuzz-smoke` replays every one.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET = "fuzz-fc-response"
HEAD = "Server: Firecracker API\r\nConnection: keep-alive\r\n"


def answer(status, body=None, extra=""):
    if body is None:
        return f"HTTP/1.1 {status} \r\n{HEAD}{extra}\r\n"
    text = json.dumps(body, separators=(",", ":"))
    return (f"HTTP/1.1 {status} \r\n{HEAD}{extra}Content-Type: application/json\r\n"
            f"Content-Length: {len(text)}\r\n\r\n{text}")


SEEDS = {
    "no-content": answer(204),
    "instance-info": answer(200, {"app_name": "Firecracker", "id": "sb-0123456789abcdef", "state": "Running",
                                  "vmm_version": "1.17.0"}),
    "fault": answer(400, {"fault_message": "The requested operation is not supported after starting the microVM."}),
    "fault-500": answer(500, {"fault_message": "Internal error"}),
    "deprecated": answer(204, extra="Deprecation: true\r\n"),
    "vm-config": answer(200, {"machine-config": {"vcpu_count": 2, "mem_size_mib": 256, "smt": False},
                              "drives": [{"drive_id": "root", "path_on_host": "disk.raw", "is_root_device": False,
                                          "is_read_only": False}], "vsock": {"guest_cid": 3, "uds_path": "v.sock"}}),
    "two-answers": answer(204) + answer(204),
    "chunked": "HTTP/1.1 200 \r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
    "bare-lf": "HTTP/1.1 204 \nServer: x\n\n",
    "folded": "HTTP/1.1 204 \r\nServer: a\r\n b\r\n\r\n",
    "dup-length": "HTTP/1.1 200 \r\nContent-Type: application/json\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
    "huge-length": "HTTP/1.1 200 \r\nContent-Type: application/json\r\nContent-Length: 9999999\r\n\r\n{}",
    "array-body": "HTTP/1.1 200 \r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]",
    "truncated": answer(200, {"state": "Paused"})[:-3],
    "http10": "HTTP/1.0 204 \r\n\r\n",
}


def main():
    d = os.path.join(HERE, "corpus", TARGET)
    os.makedirs(d, exist_ok=True)
    for name, text in SEEDS.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(text.encode())


if __name__ == "__main__":
    main()
