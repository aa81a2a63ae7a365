"""How fast one rank's training input pipeline delivers records, without training (for benchmarks/prepare_throughput).

Builds exactly the dataset a rank trains on with TensorFlow (keras.data.rank_dataset: its shards or records, shuffle,
decode, normalise, batch), runs it for a number of passes and prints records/s and MB/s of shard bytes as JSON.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import List, Optional

from hvdflow_index import read_index, verified_shards

from .frameworks import module_of


def main(argv: Optional[List[str]] = None) -> None:
    """Command line: ``python -m hvdflow_trainer.input_rate --dataset DIR [--rank R --size N --passes P]``."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--size", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    import tensorflow as tf

    rank_dataset = module_of("tensorflow", "data").rank_dataset
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    index = read_index(args.dataset)
    paths = verified_shards(args.dataset, index, "train")
    data, per_rank, mode = rank_dataset(paths, index, "train", args.rank, args.size, args.batch_size, 1, 10000,
                                        threads=args.threads)
    split = index["splits"]["train"]  # type: ignore[index]
    record_bytes = sum(int(s["bytes"]) for s in split["shards"]) / int(split["records"])  # type: ignore[index]
    rates = []
    for _ in range(args.passes):
        start = time.perf_counter()
        records = sum(int(x.shape[0]) for x, _ in data)
        rates.append(records / (time.perf_counter() - start))
    best = max(rates)
    print(json.dumps({"records_per_rank": per_rank, "sharding": mode, "records_per_s": best,
                      "mb_per_s": best * record_bytes / 1e6, "passes": rates}))


if __name__ == "__main__":
    main()
