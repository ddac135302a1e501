"""Moving output tensors from a child process to the judge.

CUDA tensors travel as CUDA IPC handles written into JSON (the judge maps the
child's memory and copies it at once, while the child waits for the reply;
a candidate's outputs are compared where they are, not copied), so outputs
never take the trip through host memory and disk. CPU tensors go
through a file read with `weights_only=True`. Either way nothing the child
sends is unpickled as code.

Each exported CUDA storage's reference count lives in a file in /dev/shm,
which PyTorch removes at its own exit; a child ends with `os._exit`, so the
child removes the files it made (`remove_count_files`) once the judge has
replied to its last bundle: otherwise they stay behind, a few a verdict.
"""

from __future__ import annotations

import base64
import os
import re
import uuid
from pathlib import Path
from typing import Any

import torch

_COUNT_FILE = re.compile(r"/torch_\d+_\d+_\d+")  # PyTorch's names for them, nothing else
_count_files: set[str] = set()  # this process's, made by _export_one

_DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
    torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64,
    torch.float8_e4m3fn, torch.float8_e5m2)}


class TransferError(Exception):
    """What the child sent cannot be read back as tensors."""


def export_bundle(bundle: dict[str, list[Any]], folder: Path) -> dict[str, Any]:
    """Describe named lists of tensors (or strings) for the judge; keep them alive until it replies."""
    if any(isinstance(v, torch.Tensor) and v.is_cuda for values in bundle.values()
           for v in values):
        return {"kind": "cuda", "items": {name: [_export_one(v) for v in values]
                                          for name, values in bundle.items()}}
    path = folder / f"bundle-{uuid.uuid4().hex}.pt"
    torch.save({name: [v.detach().cpu() if isinstance(v, torch.Tensor) else str(v)
                       for v in values] for name, values in bundle.items()}, path)
    return {"kind": "file", "path": str(path)}


def _export_one(value: Any) -> dict[str, Any]:
    if not isinstance(value, torch.Tensor):
        return {"kind": "other", "text": str(value)[:200]}
    if not value.is_cuda:
        value = value.cuda()
    (device, handle, size_bytes, offset_bytes, counter_handle, counter_offset, event_handle,
     event_sync) = value.untyped_storage()._share_cuda_()
    _count_files.add(counter_handle.decode(errors="replace"))
    return {"kind": "tensor", "dtype": str(value.dtype).replace("torch.", ""),
            "shape": list(value.shape), "stride": list(value.stride()),
            "offset": value.storage_offset(), "device": device,
            "handle": _b64(handle), "size_bytes": size_bytes, "offset_bytes": offset_bytes,
            "counter_handle": _b64(counter_handle), "counter_offset": counter_offset,
            "event_handle": _b64(event_handle), "event_sync": bool(event_sync)}


def remove_count_files(folder: str = "/dev/shm") -> int:
    """Remove the reference-count files this process's exports made; how many were removed.

    Only once no bundle of this process is still to be imported: the judge
    opens a count file by its name when it maps a tensor.
    """
    removed = 0
    for name in sorted(_count_files):
        if _COUNT_FILE.fullmatch(name):
            try:
                os.unlink(folder + name)
                removed += 1
            except OSError:
                pass
    _count_files.clear()
    return removed


def import_bundle(description: Any, device: str, source_gpu: int | None = None,
                  copy: bool = True) -> dict[str, list[Any]]:
    """Copies of the child's tensors on `device`; raises TransferError on anything malformed.

    `source_gpu` is the GPU the child was confined to (it sees it as device 0).
    `copy=False` keeps a CUDA tensor on the child's GPU where it is, mapped
    from the child's memory: read only while the child waits for the reply
    (the comparisons of a candidate's outputs); no copy of several sets'
    outputs then takes GPU memory that other lanes hold.
    """
    if not isinstance(description, dict):
        raise TransferError("the bundle description is not an object")
    if description.get("kind") == "file":
        return _import_file(str(description.get("path", "")), device)
    if description.get("kind") != "cuda" or not isinstance(description.get("items"), dict):
        raise TransferError("unknown bundle kind")
    bundle = {}
    for name, specs in description["items"].items():
        if not isinstance(specs, list):
            raise TransferError(f"bundle entry {name!r} is not a list")
        bundle[str(name)] = [_import_one(spec, device, source_gpu, copy) for spec in specs]
    torch.cuda.synchronize()
    return bundle


def _import_file(path: str, device: str) -> dict[str, list[Any]]:
    """The file's tensors on `device`. Read onto the CPU, the file is removed: that is the
    judge's last resort. Read onto a GPU it stays (in the child's scratch folder, removed
    with it), since the GPU may run out of room, now or in the comparison after, and the
    judge then reads it again, in smaller chunks or onto the CPU (oracle_run.py,
    worker_state.py): removed at the first read, the second found nothing and an honest
    candidate read as one that corrupted its report."""
    try:
        loaded = torch.load(path, weights_only=True)
    except Exception as exc:
        Path(path).unlink(missing_ok=True)
        raise TransferError(f"unreadable bundle file: {exc}") from None
    if not isinstance(loaded, dict):
        Path(path).unlink(missing_ok=True)
        raise TransferError("the bundle file holds no dictionary")
    bundle = {str(k): [v.to(device) if isinstance(v, torch.Tensor) else str(v) for v in values]
              for k, values in loaded.items() if isinstance(values, list)}
    if torch.device(device).type == "cpu":
        Path(path).unlink(missing_ok=True)
    return bundle


def _import_one(spec: Any, device: str, source_gpu: int | None, copy: bool = True) -> Any:
    if not isinstance(spec, dict):
        raise TransferError("a tensor description is not an object")
    if spec.get("kind") == "other":
        return str(spec.get("text", ""))
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    try:
        dtype = _DTYPES[spec["dtype"]]
        shape, stride = _ints(spec["shape"]), _ints(spec["stride"])
        mapped = rebuild_cuda_tensor(
            torch.Tensor, torch.Size(shape), tuple(stride), _int(spec["offset"]),
            torch.UntypedStorage, dtype,
            _int(spec["device"]) if source_gpu is None else source_gpu, _unb64(spec["handle"]),
            _int(spec["size_bytes"]), _int(spec["offset_bytes"]), False,
            _unb64(spec["counter_handle"]), _int(spec["counter_offset"]),
            _unb64(spec["event_handle"]), bool(spec["event_sync"]))
        return mapped.to(device, copy=copy)
    except (TransferError, torch.OutOfMemoryError):
        raise  # out of memory: the judge's own copy, made again on the CPU by the caller
    except Exception as exc:  # a forged or stale handle is the child's fault, never ours
        raise TransferError(f"cannot map a tensor from the child: {type(exc).__name__}: {exc}")


def _ints(values: Any) -> list[int]:
    if not isinstance(values, list) or len(values) > 16:
        raise TransferError("shape or stride is not a short list")
    return [_int(v) for v in values]


def _int(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise TransferError(f"expected a non-negative integer, got {value!r}")
    return value


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _unb64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise TransferError("a handle is not a string")
    return base64.b64decode(text)
