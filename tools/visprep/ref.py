#!/usr/bin/env python3
"""Expected values for engine/vision/preprocess's reference test, from transformers' own processor.

Reads IN/manifest.json and the images `go run ./tools/visprep` wrote, and writes OUT/ref.tar holding:
  <case>.pixels.f32.gz   the processor's pixel_values (float32 little-endian, gzip), rows x 1536
  <case>.resized.rgb     the resize's uint8 output (HWC), from torchvision as the processor calls it
  photo.decoded.rgb.gz   PIL's decoding of the JPEG (HWC uint8), against which Go's decoder is measured
  resize<i>.out.rgb      torchvision's F.resize(uint8, BICUBIC, antialias=True) of resize<i>.rgb
  results.json           grids, token counts, smart_resize results, versions, the processor's class
  expected.json          what the Go test reads of results.json
  sources.txt            the source of the functions that decide the values, as installed
The processor is built as loading the model builds it: AutoImageProcessor.from_pretrained on a folder
holding Qwen3.6's preprocessor_config.json (with the case's size bounds), so nothing is downloaded.

Usage: python3 tools/visprep/ref.py IN OUT
Then from OUT/ref.tar, IN takes *.pixels.f32.gz, photo.decoded.rgb.gz, resize*.out.rgb and expected.json.
"""

import gzip
import inspect
import io
import json
import os
import sys
import tarfile
import tempfile
import time
import traceback

import numpy as np
import torch
import transformers
import torchvision
import PIL
from PIL import Image
from transformers import AutoImageProcessor
from torchvision.transforms.v2 import functional as F

t0 = time.time()
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
man = json.load(open(os.path.join(src, "manifest.json")))
members = {}
results = {
    "versions": {
        "transformers": transformers.__version__, "torch": torch.__version__,
        "torchvision": torchvision.__version__, "pillow": PIL.__version__, "numpy": np.__version__,
    },
    "cases": {}, "errors": [],
}


try:
    results["versions"]["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
except Exception:  # noqa: BLE001
    pass


def config(lo, hi):
    return {
        "size": {"longest_edge": hi, "shortest_edge": lo},
        "patch_size": man["patch_size"], "temporal_patch_size": man["temporal_patch"], "merge_size": man["merge_size"],
        "image_mean": man["image_mean"], "image_std": man["image_std"],
        "processor_class": "Qwen3VLProcessor", "image_processor_type": "Qwen2VLImageProcessorFast",
    }


def processor(lo, hi):
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
        json.dump(config(lo, hi), f)
    try:
        return AutoImageProcessor.from_pretrained(d)
    except Exception:  # noqa: BLE001  (recorded, then the class by name)
        results["errors"].append("AutoImageProcessor: " + traceback.format_exc())
        kw = {k: v for k, v in config(lo, hi).items() if k not in ("processor_class", "image_processor_type")}
        for cls_name in ("Qwen2VLImageProcessorFast", "Qwen2VLImageProcessor"):
            if hasattr(transformers, cls_name):
                return getattr(transformers, cls_name)(**kw)
        raise


for case in man["cases"]:
    name = case["name"]
    try:
        proc = processor(case["min_pixels"], case["max_pixels"])
        img = Image.open(os.path.join(src, case["file"]))
        res = proc(images=img, return_tensors="pt")
        pv = res["pixel_values"].to(torch.float32).contiguous().numpy()
        grid = [int(v) for v in res["image_grid_thw"][0].tolist()]
        members[name + ".pixels.f32.gz"] = gzip.compress(pv.astype("<f4").tobytes(), 9, mtime=0)
        # The resize alone as the processor calls it, and whether the pixels are its normalised values.
        rgb = img.convert("RGB")
        t = torch.from_numpy(np.asarray(rgb).copy()).permute(2, 0, 1).contiguous()
        h, w = grid[1] * man["patch_size"], grid[2] * man["patch_size"]
        r = F.resize(t, size=[h, w], interpolation=F.InterpolationMode.BICUBIC, antialias=True)
        members[name + ".resized.rgb"] = r.permute(1, 2, 0).contiguous().numpy().tobytes()
        frame = (r.to(torch.float32) - 127.5) / 127.5
        p, m = man["patch_size"], man["merge_size"]
        patches = frame.unsqueeze(0).expand(2, -1, -1, -1).reshape(1, 2, 3, h // p // m, m, p, w // p // m, m, p)
        patches = patches.permute(0, 3, 6, 4, 7, 2, 1, 5, 8).reshape(-1, 3 * 2 * p * p)
        info = {
            "image_size": list(img.size), "mode": img.mode, "grid": grid,
            "tokens": grid[0] * grid[1] * grid[2] // (m * m), "rows": pv.shape[0], "dim": pv.shape[1],
            "processor": type(proc).__module__ + "." + type(proc).__name__,
            "max_diff_from_resized_normalised": float((patches.numpy() - pv).__abs__().max()),
        }
        try:  # the slow (PIL) processor, for the record
            slow = None
            for cls_name in ("Qwen2VLImageProcessorPil", "Qwen2VLImageProcessor"):
                cls = getattr(transformers, cls_name, None)
                if cls is not None and cls is not type(proc):
                    kw = {k: v for k, v in config(case["min_pixels"], case["max_pixels"]).items()
                          if k not in ("processor_class", "image_processor_type")}
                    slow = cls(**kw)
                    break
            if slow is not None:
                spv = np.asarray(slow(images=img, return_tensors="np")["pixel_values"], dtype=np.float32)
                info["slow_processor"] = type(slow).__name__
                info["slow_max_diff"] = float(np.abs(spv - pv).max())
        except Exception as e:  # noqa: BLE001
            info["slow_error"] = repr(e)
        if name == "photo":
            members["photo.decoded.rgb.gz"] = gzip.compress(np.asarray(rgb).tobytes(), 9, mtime=0)
        results["cases"][name] = info
    except Exception:
        results["errors"].append(name + ": " + traceback.format_exc())

for i, rc in enumerate(man["resize"]):
    try:
        a = np.frombuffer(open(os.path.join(src, f"resize{i}.rgb"), "rb").read(), np.uint8).reshape(rc["InH"], rc["InW"], 3)
        t = torch.from_numpy(a.copy()).permute(2, 0, 1).contiguous()
        r = F.resize(t, size=[rc["OutH"], rc["OutW"]], interpolation=F.InterpolationMode.BICUBIC, antialias=True)
        members[f"resize{i}.out.rgb"] = r.permute(1, 2, 0).contiguous().numpy().tobytes()
        rf = F.resize(t.to(torch.float32), size=[rc["OutH"], rc["OutW"]], interpolation=F.InterpolationMode.BICUBIC, antialias=True)
        results.setdefault("resize_float_path_diff", []).append(int((rf.round().clamp(0, 255) - r.to(torch.float32)).abs().max()))
    except Exception:
        results["errors"].append(f"resize{i}: " + traceback.format_exc())

sr = None
for modname in ("transformers.models.qwen2_vl.image_processing_qwen2_vl",
                "transformers.models.qwen2_vl.image_processing_pil_qwen2_vl",
                "transformers.models.qwen2_vl.vision_utils"):
    try:
        sr = getattr(__import__(modname, fromlist=["smart_resize"]), "smart_resize")
        results["smart_resize_from"] = modname
        break
    except Exception:
        pass
srs = []
for h, w, lo, hi in man["smart_resize"]:
    try:
        srs.append(list(sr(h, w, factor=man["patch_size"] * man["merge_size"], min_pixels=lo, max_pixels=hi)))
    except Exception as e:
        srs.append(repr(e))
results["smart_resize"] = srs

# The installed code that decides the values, for the record and for any later question.
texts = []
try:
    proc = processor(65536, 16777216)
    objs = [type(proc)] + [c for c in type(proc).__mro__[1:4]] + [sr]
except Exception:  # noqa: BLE001
    objs = [sr]
try:
    from transformers import image_transforms
    objs.append(image_transforms.convert_to_rgb)
except Exception:
    pass
try:
    from torchvision.transforms.v2.functional import _geometry as g
    objs += [g.resize_image, g._do_native_uint8_resize_on_cpu]
except Exception:
    pass
for o in objs:
    try:
        texts.append(f"##### {getattr(o, '__module__', '')}.{getattr(o, '__qualname__', o)}\n" + inspect.getsource(o))
    except Exception as e:
        texts.append(f"##### {o}: {e!r}")
members["sources.txt"] = "\n".join(texts).encode()

results["seconds"] = time.time() - t0
members["results.json"] = json.dumps(results, indent=1).encode()
keep = ("image_size", "mode", "grid", "tokens", "rows", "dim", "processor", "slow_processor", "slow_max_diff")
expected = {
    "generator": "python3 tools/visprep/ref.py (transformers' AutoImageProcessor from Qwen3.6's preprocessor_config.json)",
    "versions": results["versions"],
    "cases": {k: {kk: v[kk] for kk in keep if kk in v} for k, v in results["cases"].items()},
    "smart_resize": results["smart_resize"],
}
members["expected.json"] = (json.dumps(expected, indent=1) + "\n").encode()
with tarfile.open(os.path.join(out, "ref.tar"), "w") as tf:
    for n, b in sorted(members.items()):
        ti = tarfile.TarInfo(n)
        ti.size = len(b)
        tf.addfile(ti, io.BytesIO(b))
print(json.dumps({k: v for k, v in results.items() if k not in ("smart_resize",)}, indent=1))
