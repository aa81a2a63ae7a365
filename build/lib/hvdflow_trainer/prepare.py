"""Prepare a dataset into checksummed, sharded TFRecords, in parallel chunks (scatter / gather).

1. ``list``: the source adapter lists the samples, excludes what the dataset's definition excludes and assigns each
   sample its split; the samples are ordered (training split shuffled with the seed) and cut into N contiguous
   chunks, written as a manifest directory (``dataset.json`` plus ``chunk-<i>.json``).
2. ``chunk``: one job per chunk reads its samples and writes them as shards of about the target size, with each
   shard's sha256 and record count, and the per-channel statistics of its training samples (``report.json``).
3. :func:`hvdflow_index.gather` (run by the host) combines the chunks' reports into ``index.json``: shards in chunk
   order (so the records keep the manifest's order), per-channel normalisation of the training split, exclusion and
   bad-sample counts.

Every step writes into a ``.partial`` directory and renames it when complete; ``index.json`` is written last. A bad
sample (missing, unreadable, wrong shape or type) stops the chunk with its path, unless ``skip_bad_samples`` is set:
then it is skipped and counted, with its path and reason in the index.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from typing import Dict, List, Optional

from hvdflow_index import DATASET_FILE, REPORT_FILE, SPLITS, ChannelStats, PrepareError, write_json

from .records import ShardWriter
from .sources import adapter
from .sources.common import BadSample, Excluded, Progress, ordered
from .user_code import UserCodeError, exit_naming


def _load(path: str) -> Dict[str, object]:
    with open(path) as handle:
        return json.load(handle)


def _fresh(directory: str) -> str:
    """An empty ``<directory>.partial`` to write into before renaming it to ``directory``."""
    partial = directory + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    return partial


def _publish(partial: str, directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)
    os.rename(partial, directory)


def chunk_file(chunk: int) -> str:
    """The manifest file holding chunk ``chunk``'s samples."""
    return "chunk-%d.json" % chunk


def list_dataset(spec: Dict[str, object], chunks: int, out_dir: str) -> Dict[str, object]:
    """Write the manifest of ``spec``'s dataset in ``chunks`` chunks into ``out_dir``; return its summary."""
    started = time.time()
    list_samples, _ = adapter(spec["source"])  # type: ignore[arg-type]
    listing = list_samples(spec)
    samples = ordered(listing.pop("samples"), int(spec["seed"]))  # type: ignore[arg-type,call-overload]
    if not samples:
        raise PrepareError("the dataset %s has no samples" % spec.get("path", spec["source"]))
    partial = _fresh(out_dir)
    bounds = [len(samples) * i // chunks for i in range(chunks + 1)]
    for i in range(chunks):
        write_json(os.path.join(partial, chunk_file(i)), samples[bounds[i]:bounds[i + 1]])
    counts = {split: sum(1 for s in samples if s["split"] == split) for split in SPLITS}
    summary = dict(listing, spec=spec, chunks=chunks, listed=counts, listing_seconds=round(time.time() - started, 3))
    write_json(os.path.join(partial, DATASET_FILE), summary)
    _publish(partial, out_dir)
    return summary


def prepare_chunk(manifest_dir: str, chunk: int, out_dir: str, progress_seconds: float = 30.0) -> Dict[str, object]:
    """Read chunk ``chunk`` of a manifest and write its shards and ``report.json`` into ``out_dir``, saying the
    samples done of the chunk's every ``progress_seconds``."""
    import numpy as np

    started = time.time()
    summary = _load(os.path.join(manifest_dir, DATASET_FILE))
    spec: Dict[str, object] = summary["spec"]  # type: ignore[assignment]
    samples: List[Dict[str, object]] = _load(os.path.join(manifest_dir, chunk_file(chunk)))  # type: ignore[assignment]
    read = adapter(spec["source"])[1](summary, spec)  # type: ignore[arg-type]
    shape, dtype = tuple(summary["feature_shape"]), str(summary["feature_dtype"])  # type: ignore[call-overload]
    target = int(float(spec["shard_size_mb"]) * 1e6)  # type: ignore[arg-type]
    partial = _fresh(out_dir)
    writers = {split: ShardWriter(partial, split, target, dtype) for split in SPLITS}
    stats = ChannelStats()
    excluded: Dict[str, int] = {}
    skipped: List[Dict[str, str]] = []
    input_bytes = 0
    reported = started
    for done, sample in enumerate(samples):
        if time.time() - reported >= progress_seconds:
            reported = time.time()
            print("chunk %d: %d of %d samples, %.1f MB read, %.0f s" % (
                chunk, done, len(samples), input_bytes / 1e6, reported - started), flush=True)
        try:
            pixels, labels, nbytes = read(sample)
            if tuple(np.shape(pixels)) != shape:
                raise BadSample(str(sample["path"]), "shape %s, expected %s" % (np.shape(pixels), shape))
        except Excluded as exc:
            excluded[exc.reason] = excluded.get(exc.reason, 0) + 1
            continue
        except BadSample as exc:
            if not spec["skip_bad_samples"]:
                raise
            skipped.append({"path": exc.path, "reason": exc.reason})
            continue
        input_bytes += nbytes
        writers[str(sample["split"])].write(pixels, labels)
        if sample["split"] == "train":
            stats.add_image(pixels)
    splits = {}
    for split, writer in writers.items():
        shards = writer.close()
        splits[split] = {"records": sum(int(s["records"]) for s in shards), "shards": shards}  # type: ignore[call-overload]
    report = {"chunk": chunk, "samples": len(samples), "splits": splits, "train_stats": stats.to_json(),
              "excluded": excluded, "skipped": skipped, "input_bytes": input_bytes,
              "seconds": round(time.time() - started, 3)}
    write_json(os.path.join(partial, REPORT_FILE), report)
    _publish(partial, out_dir)
    return report


def main(argv: Optional[List[str]] = None) -> None:
    """Command line: ``list --spec JSON --chunks N --out DIR`` or ``chunk --manifest DIR --chunk I --out DIR``."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    lister = sub.add_parser("list", help="list the samples and write the manifest")
    lister.add_argument("--spec", required=True, help="the dataset's config entry as JSON (absolute paths)")
    lister.add_argument("--chunks", type=int, required=True)
    lister.add_argument("--out", required=True)
    lister.add_argument("--progress-seconds", type=float, default=30.0, help="how often to say how far the listing is")
    chunker = sub.add_parser("chunk", help="prepare one chunk of a manifest")
    chunker.add_argument("--manifest", required=True)
    chunker.add_argument("--chunk", type=int, required=True)
    chunker.add_argument("--out", required=True)
    chunker.add_argument("--progress-seconds", type=float, default=30.0, help="how often to say the samples done")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            Progress.seconds = args.progress_seconds
            summary = list_dataset(json.loads(args.spec), args.chunks, args.out)
            source = summary["spec"]["source"]  # type: ignore[index]
            name = source if isinstance(source, str) else source["read"]  # type: ignore[index]
            print("listed %s: %s, excluded %s" % (name, summary["listed"], summary["excluded"]))
        else:
            report = prepare_chunk(args.manifest, args.chunk, args.out, args.progress_seconds)
            print("chunk %d: %d samples, %d skipped, %s excluded, %.1f MB read in %.1f s" % (
                args.chunk, report["samples"], len(report["skipped"]), report["excluded"],  # type: ignore[arg-type]
                int(report["input_bytes"]) / 1e6, report["seconds"]))  # type: ignore[call-overload]
    except BadSample as exc:
        sys.exit("error: bad sample %s (set skip_bad_samples: true to skip and count such samples)" % exc)
    except PrepareError as exc:
        sys.exit("error: %s" % exc)
    except UserCodeError as exc:
        exit_naming(exc)


if __name__ == "__main__":
    main()
