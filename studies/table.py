"""The measured table behind lookup's choice for shapes nobody tuned, and the shipped records: timed
on a GPU, and rebuilt from the study data in studies/ on any machine.

Rebuild (CPU, a few seconds): the shipped files of autotune/data from the study data that made
them, step by step as SHIPPED lists it:

    python3 studies/table.py rebuild --out autotune/data      # writes measured/ and records/ there
    python3 studies/table.py rebuild --check                   # exit 1 unless it matches autotune/data
    python3 studies/table.py rebuild --out DIR --loo           # also each table step's leave-one-out

A change to the shipped data is a new step at the end of SHIPPED (the study files it reads
committed under studies/), then `rebuild --out autotune/data`; tests/test_dataset.py checks that
the rebuild gives autotune/data byte for byte.

Measure (GPU; each writes its JSON after every shape; --part I/N times every N-th shape from the
I-th, so that the work can span device calls sharing one --store; `studies/gpu.sh` runs them):

    python3 studies/table.py measure --out PART.json --seeds 2222 4444 5555 6666 7777 --count 20 \
        --skinny 7 --skinny-count 24 [--part 0/2] [--shapes 1500x1500x1500 ...] [--dry]
    python3 studies/table.py retime --changed stream|unaligned|unaligned-c|wgmma-unaligned|wgmma-fit --out PART.json
    python3 studies/table.py extend --family wgmma [--tile JSON ...] [--odd-count 16] --out PART.json [--table T]
    python3 studies/table.py records --out FILE.json [--dtype float32] [--label L]
    python3 studies/table.py jobs JOBS.json --out FILE.json

`measure` (steps 24 and 25): at each training shape (--shapes, autotune.bench.peers.seeded_shapes
for each of --seeds, and --skinny-count skinny shapes drawn with seed --skinny; none of the bench's
suites) every candidate: a tile (the shipped float32 NN records', the shape rule's SKINNY_TILE and
FEW_TILE with its pipeline, and at skinny shapes SKINNY_VARIANTS) and a policy
(autotune.select.neighbours.POLICIES), fitted and split there (config_for); candidates that come to
the same config are one job; lookup's own pick is timed too. The table keeps its tile list.

`retime` (steps 30-32): some of the shipped table's candidates timed again, with the best of the
shape's other candidates (whose code did not change) as an anchor, so that its speed in the table
over its speed now scales the new speeds onto the table's (the `anchored` step of SHIPPED). What
--changed names: `stream`, every tile streamed (STREAM_WORKERS blocks per SM) at every shape;
`unaligned`, at shapes with N or K not a multiple of 4 the candidates that fetch 16 bytes through
registers (wide_fetch without async_copy); `unaligned-c`, at shapes with N not a multiple of 4 the
candidates that add into C (K split or streamed) and ran within --within of the shape's best;
`wgmma-unaligned` (step 48), at shapes with N or K not a multiple of 4 the wgmma candidates with
straight-line producers, which move unaligned rows as whole 16-byte words; `wgmma-fit` (step 55), at
every shape the wgmma candidates whose fit (kernels.wgmma_space.fit) gives a width other than 64 or 128.

`extend` (step 40): a family's tiles (family_tiles), and any --tile (step 55), at the table's shapes, under the policies its
schedules have (autotune.select.neighbours.policies_for), each shape anchored by its best earlier
candidate; and --odd-count large shapes with unaligned rows (odd_shapes) with every candidate.

`records` (steps 23-25, A/B of kernel code): every shipped NN record's config at its shape. `jobs`:
any list of jobs ({"family", "params", "dtype", "shape", optional "layout", "source"}) at their shapes.

How a job is timed (step 23): every distinct kernel is built into a kernel store (--store, default a
temporary directory) by --jobs processes at once (compiling needs no GPU); then each job is launched
through the driver plan `matmul` uses (autotune.call.front.entry_plan) on PyTorch tensors, checked
against float64 rows of the product, and timed by CUDA events around a CUDA graph of launches
(autotune.bench.torch_device.TorchDevice), next to torch.matmul (cuBLAS, TF32 off) on the same tensors. The
kernels are those `import kernels` finds: put an older copy first on PYTHONPATH (and give it its own
--store) to time older code.
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

STUDIES = Path(__file__).resolve().parent
DATA = STUDIES.parent / "autotune" / "data"
ARCH = (9, 0)
SM_COUNT = 132
SAMPLES = 5

# -- the shipped data, step by step ----------------------------------------------------------------
#
# Per shipped file (autotune/data/<kind>/<gpu>.json), the steps that make it, in order, each with
# the commit that shipped it (on main) and the study files it reads (under studies/).
#
# The measured table: `table` makes it from measured parts (autotune.select.neighbours.table_of);
# `anchored` puts a `retime` run's speeds into it, each shape's scaled by its anchor, and its
# kernels' source hashes under `field`; `extended` does so for an `extend` run, whose new tiles
# and shapes it appends; `feasible` drops the candidates that autotune's space no
# longer admits at a shape (autotune.space.configs.infeasibility), as lookup passes them over;
# `relabel` gives a family's tiles the parameters it gained since (autotune.store.rows.GAINED; as
# `extended` does for the tiles it takes) and its kernels under `field` the source hash a later
# commit gave them, whose PTX was unchanged.
#
# The records: `promote` takes a file's rows (`only` those shapes, or all but those `except` names,
# where `mmtune promote` kept the records' faster row for the others), each over the row of its key (autotune.store.rows.Row.key)
# from earlier steps; `relabel` gives every row of a family the source hash a later commit gave it
# after studies/ptx_same.py found its sm_90 PTX unchanged. The result is written as
# `mmtune promote` writes a records file (autotune.store.records.promote).

#: every family's source hash after step 39's edits, which left their PTX as it was
STEP39_HASHES = {"dmma": "76cd1f097b077356", "tf32x3": "5b9d3af671d86edb", "vector": "518e63140bddc879",
                 "splitk": "2f9dd882e04ed428", "streamk": "622bc048752f2d54", "wgmma": "b3bf49dceafe423b"}

#: the wgmma family's source hash after step 43 gave it a producer warpgroup, off by default: the
#: same sm_90 PTX for every shipped wgmma row (studies/ptx_same.py)
STEP43_HASHES = {"wgmma": "c80c3d083a86b7ce"}

#: every family's source hash after step 45 gave the kernels a bias, omitted by default: the same
#: sm_90 PTX for every shipped record (studies/ptx_same.py)
STEP45_HASHES = {"wgmma": "c43413822251788d", "dmma": "6a8ed525d0516fdb", "tf32x3": "691cf9ade0526138",
                 "vector": "abb96c882b71735b", "splitk": "a442adfb92bd043d", "register": "cf77fcbacf092de1",
                 "streamk": "cf27d3ac6d20223b", "shared": "49fd31de069f0440", "naive": "60ac60522e8f4f00",
                 "gemv": "f1f15da7ff85553a"}

#: the wgmma family's source hash after step 47 gave it two producer warpgroups (producer=2): the
#: same sm_90 PTX for every shipped wgmma row (studies/ptx_same.py); and after B's split moved
#: into kernels/wgmma_copies.py: the same PTX for the rows timed on producer=2
STEP47_HASHES = {"wgmma": "37b5840ad9871f44"}
STEP47_MOVED_HASHES = {"wgmma": "a2f68dde27f49157"}

#: every family's source hash after step 48 gave the intrinsics a copy of whole 16-byte words and
#: wgmma's two producers moved unaligned rows so: the same sm_90 PTX for every shipped record
#: (studies/ptx_same.py), all of them built for aligned rows; the table's re-timing ran code that
#: placed each word's address by a word count, which the copy's five arguments (the house's
#: limit), the docstrings and cp.async's address code shared with the new copy followed
STEP48_HASHES = {"wgmma": "1d99f6ede78de43f", "dmma": "fca8366bde2e5f75", "tf32x3": "e3f94a981d85de32",
                 "vector": "975e277a70850b48", "splitk": "82d63ba512d0e0f3", "register": "933e693c2dd6d661",
                 "streamk": "fbf9937219dee21f", "shared": "eee9fce37798d5e2", "naive": "e548680c9445bcc0",
                 "gemv": "bee80c995fa8a277"}

#: every family's source hash after step 49 gave the mma.sync families (dmma, tf32x3) other ways to
#: store their tiles (`stored`), "mn" by default, and the intrinsics' two-element loads their
#: size's alignment: the same sm_90 PTX for every shipped record (studies/ptx_same.py)
STEP49_HASHES = {"wgmma": "88a644be67767efd", "dmma": "8e78047d5e3ef9ea", "tf32x3": "c8206417bce05af5",
                 "vector": "77e0429cdab60417", "splitk": "d54f13f15138e3eb", "register": "65fa8e91531a2b21",
                 "streamk": "822c2cf5beb8e475", "shared": "24908dc3ac1866c5", "naive": "7b728afa945ddbf7",
                 "gemv": "9128497dce6ff119"}

#: every family's source hash after step 50 gave dmma a second tile for a cold tune to try first
#: (`few_tile`, in the families' contract): the same sm_90 PTX for every shipped record
#: (studies/ptx_same.py)
STEP50_HASHES = {"wgmma": "df101b90070127a6", "dmma": "1dbaa1d467c28134", "tf32x3": "90328122c517962f",
                 "vector": "94afdc7630da6806", "splitk": "07522f42dc95dbde", "register": "8ab9c4edaa8c3f8d",
                 "streamk": "4ecc2d572cfa44ff", "shared": "74bea3c8429871a1", "naive": "ffe5d25c102762ce",
                 "gemv": "87f6f673163940c2"}

STEP51_HASHES = {"wgmma": "e199b22cceab5fa3", "dmma": "e852524ecfe9429f", "tf32x3": "01179feb027a7c63",
                 "vector": "9ae10155ab33c358", "splitk": "83de2adf75f8bbfe", "register": "1d4ed3a436b1a015",
                 "streamk": "fdc1a9af51bfff50", "shared": "548000f0693bc65a", "naive": "f7142e0728087c0a",
                 "gemv": "a8f3edd40f01b9b8"}
#: the families whose PTX step 51 left as it was (studies/ptx_same.py); dmma's and tf32x3's rows were tuned again
STEP51_SAME = {family: h for family, h in STEP51_HASHES.items() if family not in ("dmma", "tf32x3")}
#: dmma's docstring told of its two fragment sets, after the tuning
STEP51_DOCSTRING = {"dmma": "68e3793d9c50ff61", "tf32x3": "1c5e51ae6c4b3793"}
#: gemv's few-rows rule took float64 (kernels.gemv.FEW_ROWS_SPLIT_K): the same PTX (studies/ptx_same.py)
STEP53_GEMV = {"gemv": "795d2611daf6bfd7"}
#: gemv's streamed B and A read as vectors (parameters off by default): the same PTX for the
#: records written before and for the rows tuned on the step's builds (studies/ptx_same.py)
STEP54_GEMV = {"gemv": "145b2f58c86dbc6b"}
#: every family's source hash after step 55 gave wgmma tiles of any 8 columns and swapped operands
#: (`swap`, off by default) and the families' contract a fit (Family.fit): the same sm_90 PTX for
#: every shipped record and for wgmma's unaligned builds of 64 and 128 columns (studies/ptx_same.py)
STEP55_HASHES = {"wgmma": "15495fcc158b3ea5", "dmma": "9a0aa5e66a19f1ac", "tf32x3": "8b659bf735419253",
                 "vector": "bf14f04d3b40e22e", "splitk": "6fabef57523ae9d7", "register": "6a4296fba5167234",
                 "streamk": "45b22ad810259906", "shared": "3f4d94121278760b", "naive": "dc99bee5c05df9ed",
                 "gemv": "e8ac55794b4d8383"}

#: dmma's docstring told why its untested k-loop needs no tests, after the step-58 tuning: the same
#: sm_90 PTX for the 37 dmma records (studies/ptx_same.py)
STEP58_DOCSTRING = {"dmma": "2a3b8f75667b54dc", "tf32x3": "8af2fb2881a043cb"}
#: step 59: float64 reads one element a load from tiles of any layout (kernels.mma_space.paired); the
#: same sm_90 PTX for every "mn" float64 record and every tf32x3 build (studies/ptx_same.py), and for the
#: H200's rows tuned before the few tile and the docstrings changed
STEP59_UNPAIRED = {"dmma": "48d1a5b11a2678d0", "tf32x3": "8273f1e13ceb6d08"}
#: the H100's float64 records of tiles as they lie in memory, whose code step 59 changed
STEP59_H100_MEMORY = ["1024x1024x1024@float64", "8192x16x8192@float64", "16384x64x16384@float64"]
#: step 60: a float64 lane may write its two columns of C as one 16-byte store (kernels.mma_epilogue,
#: `stores`, "elements" by default); the same sm_90 PTX for every dmma record and for the step-60 tunes'
#: rows, built on the code they were timed on (studies/ptx_same.py; the defaults gained `stores` after)
STEP60_PAIRS = {"dmma": "2a033be0faca54e6", "tf32x3": "0278b16e092374b3"}
#: the shapes whose step-59 row the step-60 tune did not beat (64x4096x16384: by the tuner's timing it did, by
#: the bench's it did not)
STEP60_KEPT = ["16x8192x8192@float64", "64x4096x16384@float64", "256x8192x8192@float64", "777x1555x333@float64",
               "1023x1025x999@float64"]
#: every family's source hash after step 61 gave the families' contract a skinny tile for a cold tune
#: (Family.skinny_tile) and dmma's and tf32x3's space tiles of 16 rows or columns: the same sm_90 PTX for
#: every shipped record (studies/ptx_same.py; the step-61 tune's rows were timed on this code before a
#: comment of kernels/mma_space.py changed)
STEP61_HASHES = {"wgmma": "b7055580850b186a", "dmma": "3db4fb618fd5ee86", "tf32x3": "fd77e1f36f3b7999",
                 "vector": "b974038d346de1af", "splitk": "d374d9a51f569c4c", "register": "0a619d535b58022b",
                 "streamk": "ad0fb720ca43244e", "shared": "29222c835d63aa02", "naive": "a65097b6941e4f5f",
                 "gemv": "1ca7fe33dcc67d7b"}
#: the step-61 tune's row the H200 keeps from before: the cost model priced the new row's 128 x 64 tile
#: from it and served it at other skinny shapes, where it ran slower (docs/performance.md, step 61)
STEP61_KEPT = ["16384x64x16384@float64"]
#: every family's source hash after step 62 gave the families' contract a small tile (Family.small_tile),
#: dmma's: the same sm_90 PTX for every shipped record (studies/ptx_same.py; dmma's and tf32x3's again
#: after a docstring of kernels/mma_space.py changed)
STEP62_HASHES = {"wgmma": "a083a2cb904e1bb5", "dmma": "c2a99e011a342f91", "tf32x3": "db1c495f88784108",
                 "vector": "6b2c0a86f00ce72e", "splitk": "70ec55f514a19c95", "register": "df9ac795566cacac",
                 "streamk": "7aa4ad57fcc7934c", "shared": "63a08d9c42096786", "naive": "78b4fa5987d38256",
                 "gemv": "31c3357d82082f90"}

#: every family's source hash after step 63 gave the families' contract small tiles in tiers
#: (Family.small_tiles), dmma's: the same sm_90 PTX for every shipped record (studies/ptx_same.py)
STEP63_HASHES = {"wgmma": "ec99d11908c72954", "dmma": "545593142d1aa8b0", "tf32x3": "35a78fb2ace70b4c",
                 "vector": "b4b2d2d11d07b906", "splitk": "2239d6279e7bc903", "register": "cd2de505cf804aa9",
                 "streamk": "68786abf67aca3f2", "shared": "1045b03661cd8580", "naive": "b66f90742fc4c0af",
                 "gemv": "63af3d1c0cd9b0ba"}
#: every family's source hash after step 64 gave the families' contract a long-K tile (Family.long_k_tile),
#: dmma's: the same sm_90 PTX for every shipped record (studies/ptx_same.py)
STEP64_HASHES = {"wgmma": "abd5fc6489aef83c", "dmma": "d503bdfe1ed4d626", "tf32x3": "54138ac45e38c6eb",
                 "vector": "3a9dae586457a3bb", "splitk": "a9080eb56c388047", "register": "94ec1a90b9f9bf62",
                 "streamk": "e61315e953adbe82", "shared": "4a85093d5177ae0e", "naive": "45df995a2013ab62",
                 "gemv": "332842da1932e91a"}
#: every family's source hash after step 65 said in the families' contract that each tier of small tiles
#: lists its squarest first (Family.small_tiles) and gave dmma's space a third min_blocks: the same sm_90 PTX
#: for every shipped record (studies/ptx_same.py)
STEP65_HASHES = {"wgmma": "5d8351c062e45c00", "dmma": "ce100286837b6c2f", "tf32x3": "49b6fc177a7af637",
                 "vector": "f3ee3f4e2c9bfdce", "splitk": "29f113a7377ecda7", "register": "64ab185389650bcc",
                 "streamk": "5411a5b6251db512", "shared": "89f4721dd538cd44", "naive": "44e0e861f796aa73",
                 "gemv": "76a1b3dc648f2a48"}
#: the step-63 tune's row the H200 keeps: the tune chose the shipped config again
STEP63_KEPT = ["512x512x512@float64"]

SHIPPED = {
    "measured/nvidia-h200.json.xz": [
        {"step": "table", "commit": "9494194",
         "what": "step 25: every candidate at 124 training shapes on the step-25 kernels",
         "parts": ["h200/step25/table-0of2.json.xz", "h200/step25/table-1of2.json.xz"]},
        {"step": "anchored", "commit": "6f91338", "field": "stream_kernels",
         "what": "step 30: every tile streamed at every shape",
         "parts": ["h200/step30/table/table-0of2.json.xz", "h200/step30/table/table-1of2.json.xz"]},
        {"step": "feasible", "commit": "1a320c7",
         "what": "stream-K's restriction counts shared memory: 75 measurements of candidates that no longer pass"},
        {"step": "anchored", "commit": "479cdc3", "field": "unaligned_kernels",
         "what": "step 31: candidates fetching through registers, at the 68 shapes with unaligned rows",
         "parts": ["h200/step31/table/table-0of2.json.xz", "h200/step31/table/table-1of2.json.xz"]},
        {"step": "anchored", "commit": "90ddf49", "field": "unaligned_c_kernels",
         "what": "step 32: candidates adding into C, at the 56 shapes with unaligned C",
         "parts": ["h200/step32/table/table-0of2.json.xz", "h200/step32/table/table-1of2.json.xz"]},
        {"step": "extended", "commit": "step 40 (issue 39)", "field": "wgmma_kernels",
         "what": "step 40: the warpgroup family's four tiles (wgmma, precision tf32x3), whole and split to fill "
                 "waves, at every shape; 16 large shapes with unaligned rows (odd_shapes, seed 11), every candidate",
         "parts": ["h200/step40/table/extend-wgmma-0of2.json.xz", "h200/step40/table/extend-wgmma-1of2.json.xz"]},
        {"step": "relabel", "commit": "step 43 (issue 39)", "field": "wgmma_kernels", "hashes": STEP43_HASHES,
         "what": "step 43: the wgmma tiles as producer=0, which compiles to the code they were measured on"},
        {"step": "extended", "commit": "step 43 (issue 39)", "field": "wgmma_kernels",
         "what": "step 43: the wgmma tiles with a producer warpgroup (producer=1; its 64-row tiles are infeasible), "
                 "whole and split to fill waves, at every shape, each anchored by its best earlier candidate",
         "parts": ["h200/step43/table/extend-wgmma-0of1.json.xz"]},
        {"step": "relabel", "commit": "step 45 (issue 40)", "field": "wgmma_kernels", "hashes": STEP45_HASHES,
         "what": "step 45: every family's kernels take a bias, omitted by default, which compiles to the code they "
                 "were measured on"},
        {"step": "relabel", "commit": "step 47 (issue 39)", "field": "wgmma_kernels", "hashes": STEP47_HASHES,
         "what": "step 47: wgmma gained two producer warpgroups (producer=2); its other tiles compile to the code "
                 "they were measured on"},
        {"step": "extended", "commit": "step 47 (issue 39)", "field": "wgmma_kernels",
         "what": "step 47: the wgmma tiles with two producer warpgroups (producer=2), whole and split to fill waves, "
                 "at every shape, each anchored by its best earlier candidate",
         "parts": ["h200/step47/table/extend-wgmma-0of1.json.xz"]},
        {"step": "relabel", "commit": "step 47 (issue 39)", "field": "wgmma_kernels", "hashes": STEP47_MOVED_HASHES,
         "what": "step 47: B's split moved into kernels/wgmma_copies.py, which compiles to the code the tiles "
                 "were measured on"},
        {"step": "anchored", "commit": "step 48 (issue 39)", "field": "wgmma_kernels",
         "what": "step 48: the wgmma candidates with two producer warpgroups, which now move unaligned rows as "
                 "whole 16-byte words, timed again at the 55 shapes with N or K not a multiple of 4, anchored",
         "parts": ["h200/step48/table/table-0of1.json.xz"]},
        {"step": "relabel", "commit": "step 48 (issue 39)", "field": "wgmma_kernels", "hashes": STEP48_HASHES,
         "what": "step 48: the copy of whole words given its word by an element's index rather than a word "
                 "count, its address code shared with cp.async's, and the wgmma docstrings, after the "
                 "re-timing (the prototype's jobs again: studies/h100/step48/prototype/final.json.xz)"},
        {"step": "relabel", "commit": "step 49 (issue 39)", "field": "wgmma_kernels", "hashes": STEP49_HASHES,
         "what": "step 49: the mma.sync families' stored tiles, off by default, which leave every kernel's PTX as "
                 "it was"},
        {"step": "relabel", "commit": "step 50 (issue 39)", "field": "wgmma_kernels", "hashes": STEP50_HASHES,
         "what": "step 50: dmma's few tile for a cold tune, which leaves every kernel's PTX as it was"},
        {"step": "relabel", "commit": "step 51 (issue 39)", "field": "wgmma_kernels", "hashes": STEP51_SAME,
         "what": "step 51: dmma's copies as one offset a thread and two fragment sets, which leave the other "
                 "families' PTX as it was"},
        {"step": "relabel", "commit": "step 55 (issue 39)", "field": "wgmma_kernels", "hashes": STEP55_HASHES,
         "what": "step 55: wgmma's tiles of any 8 columns and swapped operands, off by default, and the families' "
                 "fit, which leave every kernel's PTX as it was"},
        {"step": "anchored", "commit": "step 55 (issue 39)", "field": "wgmma_kernels",
         "what": "step 55: the unswapped wgmma tiles with two producers, narrowed to an N under their width "
                 "(kernels.wgmma.fit), timed again at the 22 shapes where that changed their config, anchored",
         "parts": ["h200/step55/table/retime.json.xz"]},
        {"step": "extended", "commit": "step 55 (issue 39)", "field": "wgmma_kernels",
         "what": "step 55: two swapped wgmma tiles (bn 128 and 64, two producers), their columns fitted to M, "
                 "whole and split to fill waves, at every shape, each anchored by its best earlier candidate",
         "parts": ["h200/step55/table/extend.json.xz"]},
        {"step": "relabel", "commit": "step 61 (issue 39)", "field": "wgmma_kernels", "hashes": STEP61_HASHES,
         "what": "step 61: the families' skinny tile and dmma's 16-wide tiles, which leave every kernel's PTX as it "
                 "was"},
        {"step": "relabel", "commit": "step 62 (issue 39)", "field": "wgmma_kernels", "hashes": STEP62_HASHES,
         "what": "step 62: the families' small tile, which leaves every kernel's PTX as it was"},
        {"step": "relabel", "commit": "step 63 (issue 39)", "field": "wgmma_kernels", "hashes": STEP63_HASHES,
         "what": "step 63: the families' small tiles in tiers, which leave every kernel's PTX as it was"},
        {"step": "relabel", "commit": "step 64 (issue 39)", "field": "wgmma_kernels", "hashes": STEP64_HASHES,
         "what": "step 64: the families' long-K tile, which leaves every kernel's PTX as it was"},
        {"step": "relabel", "commit": "step 65 (issue 39)", "field": "wgmma_kernels", "hashes": STEP65_HASHES,
         "what": "step 65: the small tiers' squarest tile first and a third min_blocks, which leave every "
                 "kernel's PTX as it was"},
    ],
    "records/nvidia-h200.json": [
        {"step": "promote", "commit": "9494194", "file": "h200/step25/retimed.json.xz",
         "what": "step 25: all 34 records re-timed on the step-25 kernels"},
        {"step": "promote", "commit": "9494194", "file": "h200/step25/tune/tuned.json.xz",
         "only": ["1280x1280x1280", "16384x64x16384"], "what": "step 25: four shapes tuned again"},
        {"step": "promote", "commit": "80b4a0f", "file": "h200/step27/tune/tuned.json.xz",
         "what": "step 27: eight float64 shapes tuned on the dmma family"},
        {"step": "promote", "commit": "80b4a0f", "file": "h200/step27/tune8192/tuned.json",
         "what": "step 27: float64 8192^3 tuned"},
        {"step": "promote", "commit": "a0f627a", "file": "h200/step28/tune/retimed.json.xz",
         "except": ["1024x1024x1024@float32"],
         "what": "step 28: eight float32 shapes tuned, the stale records re-timed (1024^3 float32 kept its row)"},
        {"step": "promote", "commit": "6f91338", "file": "h200/step30/tune/tuned.json.xz",
         "only": ["64x4096x16384", "257x5003x1031", "1000x1000x1000", "1024x1024x1024"],
         "what": "step 30: seven shapes tuned with stream-K, four promoted"},
        {"step": "promote", "commit": "aaf733c", "file": "h200/step31/tune/tuned.json", "only": ["257x5003x1031"],
         "what": "step 31: the three unaligned wide-suite shapes tuned, one promoted"},
        {"step": "promote", "commit": "90ddf49", "file": "h200/step32/tune/tuned.json",
         "what": "step 32: the three unaligned wide-suite shapes tuned, all promoted"},
        {"step": "promote", "commit": "9c578e9", "file": "h200/step35/rows.json.xz",
         "what": "step 35: the seven tf32x3 rows re-timed, FFMA rows tuned at their shapes"},
        {"step": "relabel", "commit": "9c578e9",
         "hashes": {"dmma": "92a2f9cb3c20600d", "splitk": "024e9be007ffe58e", "streamk": "1a82cd700f036fbe",
                    "tf32x3": "5730437b47257c87", "vector": "e861213c0d10400a"},
         "what": "the records' sm_90 PTX unchanged since they were timed (studies/ptx_same.py; also "
                 "re-labelled so in 6f91338, 1a320c7, 479cdc3, 90ddf49, 5edb96e)"},
        {"step": "relabel", "commit": "38cc965",
         "hashes": {"dmma": "6a57709fa72b5733", "splitk": "6ed1b233e63c12f5", "streamk": "5f8a8fd988161645",
                    "tf32x3": "d61c556e72e71093", "vector": "46c18dbcbf6be0a5"},
         "what": "the kernels package split into modules (rules, contract, registry, ptx, simulated, the "
                 "families' spaces) with the same sm_90 PTX for all 41 records (studies/ptx_same.py)"},
        {"step": "relabel", "commit": "step 37 (issue 38)",
         "hashes": {"dmma": "89edf771b001b7a4", "splitk": "a33334a5730dbff2", "streamk": "1f51d55730bc962d",
                    "tf32x3": "dc50226632e9b3d6", "vector": "8bfff77fd2b69181"},
         "what": "the families' records built with keywords, their tile movers given a Movement, one "
                 "compute-capability parser: the same sm_90 PTX for all 41 records (studies/ptx_same.py)"},
        {"step": "relabel", "commit": "step 38 (issue 39)",
         "hashes": {"dmma": "06d80e040ec03129", "splitk": "e3c48b5f41d0c25a", "streamk": "cc0f3336ceccad32",
                    "tf32x3": "73227d1a9e9657c2", "vector": "a8f0260fda7b91dd"},
         "what": "kernels.rules.Arch names arch-specific targets (sm_90a): the same sm_90 PTX for all 41 "
                 "records (studies/ptx_same.py)"},
        {"step": "promote", "commit": "step 39 (issue 39)", "file": "h200/step39/tune/tuned.json.xz",
         "what": "step 39: the warpgroup family (wgmma, precision tf32x3) tuned at 11 wide-suite shapes in NN, "
                 "3 in NT and 2 in TN"},
        {"step": "relabel", "commit": "step 39 (issue 39)", "hashes": STEP39_HASHES,
         "what": "the TF32 split takes a scale, Arch.has and Arch.native, the wgmma docstrings: the same "
                 "sm_90 PTX for all 41 records and the 36 wgmma rows of step 39 (studies/ptx_same.py)"},
        {"step": "relabel", "commit": "step 43 (issue 39)", "hashes": STEP43_HASHES,
         "what": "step 43: wgmma gained a producer warpgroup, off by default: the same sm_90 PTX for its rows"},
        {"step": "promote", "commit": "step 43 (issue 39)", "file": "h200/step43/variant-rows.json.xz",
         "what": "step 43: every wgmma record timed with a producer warpgroup next to its own config "
                 "(studies/variant_rows.py); all 16 faster"},
        {"step": "relabel", "commit": "step 45 (issue 40)", "hashes": STEP45_HASHES,
         "what": "step 45: every family's kernels take a bias, omitted by default: the same sm_90 PTX for all 51 "
                 "records (studies/ptx_same.py)"},
        {"step": "relabel", "commit": "step 47 (issue 39)", "hashes": STEP47_HASHES,
         "what": "step 47: wgmma gained two producer warpgroups (producer=2): the same sm_90 PTX for its 16 records "
                 "(studies/ptx_same.py)"},
        {"step": "promote", "commit": "step 47 (issue 39)", "file": "h200/step47/variant-rows.json.xz",
         "what": "step 47: every wgmma record timed with two producer warpgroups next to its own config "
                 "(studies/variant_rows.py); all 16 faster"},
        {"step": "relabel", "commit": "step 47 (issue 39)", "hashes": STEP47_MOVED_HASHES,
         "what": "step 47: B's split moved into kernels/wgmma_copies.py: the same sm_90 PTX for the 16 promoted "
                 "records (studies/ptx_same.py)"},
        {"step": "relabel", "commit": "step 48 (issue 39)", "hashes": STEP48_HASHES,
         "what": "step 48: wgmma's two producers move unaligned rows as whole 16-byte words: the same sm_90 PTX "
                 "for all 51 records (studies/ptx_same.py)"},
        {"step": "relabel", "commit": "step 49 (issue 39)", "hashes": STEP49_HASHES,
         "what": "step 49: the mma.sync families' stored tiles, \"mn\" by default: the same sm_90 PTX for all 51 "
                 "records (studies/ptx_same.py)"},
        {"step": "relabel", "commit": "step 50 (issue 39)", "hashes": STEP50_HASHES,
         "what": "step 50: dmma's few tile for a cold tune: the same sm_90 PTX for all 51 records "
                 "(studies/ptx_same.py)"},
        {"step": "promote", "commit": "step 50 (issue 39)", "file": "h200/step50/tune64/tuned.json.xz",
         "what": "step 50: the nine float64 records of the step-27 tile (16 x 8 x 4, 64x128) tuned again on an "
                 "H200, 10 trials each from the first tile (16 x 8 x 8, 8-deep, 4 stages) and the few tile; all "
                 "nine faster"},
        {"step": "promote", "commit": "step 50 (issue 39)", "file": "h200/step50/tune64-more/tuned.json.xz",
         "what": "step 50: float64 tuned on an H200 at the ten wide-suite shapes that had no H200 row (the H100's "
                 "rows served them), 10 trials each; all ten added"},
        {"step": "relabel", "commit": "step 51 (issue 39)", "hashes": STEP51_SAME,
         "what": "step 51: dmma's copies as one offset a thread and two fragment sets: the same sm_90 PTX for the "
                 "41 records of the other families (studies/ptx_same.py)"},
        {"step": "promote", "commit": "step 51 (issue 39)", "file": "h200/step51/tune64/tuned.json.xz",
         "what": "step 51: the 19 dmma and the one tf32x3 record tuned again on an H200 on the new code, 12 "
                 "trials each (`mmtune tune --recorded`)"},
        {"step": "relabel", "commit": "step 51 (issue 39)", "hashes": STEP51_DOCSTRING,
         "what": "step 51: dmma's docstring, after the tuning: the same code"},
        {"step": "promote", "commit": "step 52 (issue 39)", "file": "h200/step52/layouts/tuned.json.xz",
         "what": "step 52: tf32x3 in NT and TN tuned on an H200 at the wide suite's mid and large shapes that had "
                 "no row in that layout (`mmtune tune --recorded --family wgmma --trials 12`), 17 rows"},
        {"step": "promote", "commit": "step 54 (issue 39)", "file": "h200/step54/gemv/tuned.json.xz",
         "what": "step 54: x @ W.T with W of 4096 x 4096 tuned on an H200 at M = 1, 2 and 4 (`mmtune tune --family "
                 "gemv --layout NT --trials 30`), B streamed and A read as vectors in the space; three new rows"},
        {"step": "relabel", "commit": "step 54 (issue 39)", "hashes": STEP54_GEMV,
         "what": "step 54: gemv's docstring and names after the tuning: the same sm_90 PTX for the three rows"},
        {"step": "relabel", "commit": "step 55 (issue 39)", "hashes": STEP55_HASHES,
         "what": "step 55: wgmma's tiles of any 8 columns and swapped operands, off by default, and the families' "
                 "fit: the same sm_90 PTX for every record (studies/ptx_same.py)"},
        {"step": "promote", "commit": "step 58 (issue 39)", "file": "h200/step58/tune64/tuned.json.xz",
         "what": "step 58: the 19 dmma records tuned again on an H200 on the k-loop without branches, 10 trials "
                 "each (`mmtune tune --recorded`)"},
        {"step": "drop", "commit": "step 58 (issue 39)", "family": "tf32x3", "only": ["64x4096x16384@float32"],
         "what": "step 58: the one tf32x3 record, timed on the code before the k-loop without branches and not "
                 "timed again (the session's device time ran out); its shape has a current splitk row"},
        {"step": "relabel", "commit": "step 58 (issue 39)", "hashes": STEP58_DOCSTRING,
         "what": "step 58: dmma's docstring after the tuning: the same sm_90 PTX"},
        {"step": "promote", "commit": "step 59 (issue 39)", "file": "h200/step59/tune64/tuned.json.xz",
         "what": "step 59: the 20 dmma records tuned again on an H200 on float64 read one element a load (10 "
                 "trials; eight mid and odd shapes again at 28, then 16 from the new few tile), 16384x64x16384 a "
                 "dmma row for the first time, and 64x4096x16384 in tf32x3 (a wgmma row)"},
        {"step": "relabel", "commit": "step 59 (issue 39)", "hashes": STEP59_UNPAIRED,
         "what": "step 59: every row, tuned before the few tile and dmma's docstrings changed: the same sm_90 PTX"},
        {"step": "promote", "commit": "step 60 (issue 39)", "file": "h200/step60/tune64/tuned.json.xz",
         "except": STEP60_KEPT,
         "what": "step 60: the 22 float64 products tuned again on an H200 with C's stores in the space (12 trials, "
                 "`mmtune tune --recorded`); 17 rows promoted, where they beat the step-59 row"},
        {"step": "promote", "commit": "step 60 (issue 39)", "file": "h200/step60/tune-large/tuned.json.xz",
         "only": ["4096x4096x4096@float64", "2048x8192x2048@float64"],
         "what": "step 60: four large float64 shapes tuned again (20 trials, `mmtune tune`); the two rows that "
                 "beat the first tune's promoted"},
        {"step": "relabel", "commit": "step 60 (issue 39)", "hashes": STEP60_PAIRS,
         "what": "step 60: C's paired stores, a parameter off by default: the same sm_90 PTX for every row"},
        {"step": "promote", "commit": "step 61 (issue 39)", "file": "h200/step61/tune/tuned.json.xz",
         "except": STEP61_KEPT,
         "what": "step 61: six skinny float64 shapes tuned on an H200 with 16-wide tiles in the space and a first "
                 "guess fitted to C's short side (16 trials, 24 at three of them); five rows promoted"},
        {"step": "relabel", "commit": "step 61 (issue 39)", "hashes": STEP61_HASHES,
         "what": "step 61: the families' skinny tile and dmma's 16-wide tiles: the same sm_90 PTX for every row"},
        {"step": "relabel", "commit": "step 62 (issue 39)", "hashes": STEP62_HASHES,
         "what": "step 62: the families' small tile: the same sm_90 PTX for every row"},
        {"step": "relabel", "commit": "step 63 (issue 39)", "hashes": STEP63_HASHES,
         "what": "step 63: the families' small tiles in tiers: the same sm_90 PTX for every row"},
        {"step": "promote", "commit": "step 63 (issue 39)", "file": "h200/step63/tune/tuned.json.xz",
         "except": STEP63_KEPT,
         "what": "step 63: 256x256x256 and 512x512x512 float64 tuned again with the small tiles among the first "
                 "guesses (16 trials); 256x256x256's row promoted"},
        {"step": "relabel", "commit": "step 64 (issue 39)", "hashes": STEP64_HASHES,
         "what": "step 64: the families' long-K tile: the same sm_90 PTX for every row"},
        {"step": "relabel", "commit": "step 65 (issue 39)", "hashes": STEP65_HASHES,
         "what": "step 65: the small tiers' squarest tile first and a third min_blocks: the same sm_90 PTX for "
                 "every row"},
    ],
    "records/nvidia-h100-80gb-hbm3.json": [
        {"step": "promote", "commit": "step 39 (issue 39)", "file": "h100/step39/tune/tuned.json.xz",
         "what": "step 39: the warpgroup family (wgmma, precision tf32x3) tuned at 11 wide-suite shapes in NN, "
                 "2 in NT and 1 in TN, on an H100"},
        {"step": "promote", "commit": "step 39 (issue 39)", "file": "h100/step39/nt-sweep/tuned.json",
         "what": "step 39: x @ W.T with W of 4096 x 4096 (NT) tuned at M = 128 to 2048 on an H100"},
        {"step": "promote", "commit": "step 39 (issue 39)", "file": "h100/step39/nt-small/tuned.json",
         "what": "step 39: the same product's FFMA rows (precision ieee) tuned at M = 2, 4, 32, 64 and 100"},
        {"step": "relabel", "commit": "step 39 (issue 39)", "hashes": STEP39_HASHES,
         "what": "the wgmma docstrings: the same sm_90 PTX for the 36 wgmma rows of step 39 (studies/ptx_same.py)"},
        {"step": "promote", "commit": "step 40 (issue 39)", "file": "h100/step40/nt-small/tuned.json",
         "only": ["100x4096x4096"],
         "what": "step 40: x @ W.T (NT) with wgmma tuned at M = 32, 64 and 100 on an H100; M = 100 promoted, where "
                 "it beat the FFMA row (at 32 and 64 the FFMA rows stay faster)"},
        {"step": "relabel", "commit": "step 43 (issue 39)", "hashes": STEP43_HASHES,
         "what": "step 43: wgmma gained a producer warpgroup, off by default: the same sm_90 PTX for its rows"},
        {"step": "promote", "commit": "step 43 (issue 39)", "file": "h100/step43/variant-rows.json.xz",
         "what": "step 43: every wgmma record timed with a producer warpgroup next to its own config "
                 "(studies/variant_rows.py); all 21 faster"},
        {"step": "relabel", "commit": "step 45 (issue 40)", "hashes": STEP45_HASHES,
         "what": "step 45: every family's kernels take a bias, omitted by default: the same sm_90 PTX for all 26 "
                 "records (studies/ptx_same.py)"},
        {"step": "relabel", "commit": "step 47 (issue 39)", "hashes": STEP47_HASHES,
         "what": "step 47: wgmma gained two producer warpgroups (producer=2): the same sm_90 PTX for its 21 records "
                 "(studies/ptx_same.py)"},
        {"step": "promote", "commit": "step 47 (issue 39)", "file": "h100/step47/variant-rows.json.xz",
         "what": "step 47: every wgmma record timed with two producer warpgroups next to its own config "
                 "(studies/variant_rows.py); all 21 faster"},
        {"step": "relabel", "commit": "step 47 (issue 39)", "hashes": STEP47_MOVED_HASHES,
         "what": "step 47: B's split moved into kernels/wgmma_copies.py: the same sm_90 PTX for the 21 promoted "
                 "records (studies/ptx_same.py)"},
        {"step": "promote", "commit": "step 47 (issue 39)", "file": "h100/step47/nt-tune/tuned.json.xz",
         "what": "step 47: x @ W.T (NT) with W of 4096 x 4096 tuned in tf32x3 at M = 64 (wgmma, 24 trials; a new "
                 "row) and M = 4 (gemv, 30 trials; faster than the record)"},
        {"step": "relabel", "commit": "step 48 (issue 39)", "hashes": STEP48_HASHES,
         "what": "step 48: wgmma's two producers move unaligned rows as whole 16-byte words: the same sm_90 PTX "
                 "for all 27 records (studies/ptx_same.py)"},
        {"step": "promote", "commit": "step 49 (issue 39)", "file": "h100/step49/tune64/tuned.json.xz",
         "what": "step 49: float64 tuned on an H100 at the 18 wide-suite shapes (`mmtune tune --recorded`, 12 "
                 "trials; the seven under 2048^3 on to 36), from the new first tile (16 x 8 x 8, 8-deep, 4 stages)"},
        {"step": "relabel", "commit": "step 49 (issue 39)", "hashes": STEP49_HASHES,
         "what": "step 49: the mma.sync families' stored tiles, \"mn\" by default, and their reads of adjacent k's "
                 "folded into one reader: the same sm_90 PTX for all 45 records (studies/ptx_same.py)"},
        {"step": "relabel", "commit": "step 50 (issue 39)", "hashes": STEP50_HASHES,
         "what": "step 50: dmma's few tile for a cold tune: the same sm_90 PTX for all 45 records "
                 "(studies/ptx_same.py)"},
        {"step": "promote", "commit": "step 50 (issue 39)", "file": "h100/step50/tune64/tuned.json.xz",
         "only": ["1000x1000x1000", "1024x1024x1024"],
         "what": "step 50: float64 tuned again on an H100 at the seven wide-suite shapes under 2048^3 (20 trials "
                 "each, from the first tile and, where its blocks would give an SM fewer than two, the few tile); "
                 "the two faster than their records promoted, both on the few tile"},
        {"step": "relabel", "commit": "step 51 (issue 39)", "hashes": STEP51_SAME,
         "what": "step 51: dmma's copies as one offset a thread and two fragment sets: the same sm_90 PTX for the "
                 "27 records of the other families (studies/ptx_same.py)"},
        {"step": "promote", "commit": "step 51 (issue 39)", "file": "h100/step51/tune64/tuned.json.xz",
         "what": "step 51: the 18 dmma records tuned again on an H100 on the new code, 12 trials each "
                 "(`mmtune tune --recorded`)"},
        {"step": "relabel", "commit": "step 51 (issue 39)", "hashes": STEP51_DOCSTRING,
         "what": "step 51: dmma's docstring, after the tuning: the same code"},
        {"step": "promote", "commit": "step 52 (issue 39)", "file": "h100/step52/layouts/tuned.json.xz",
         "what": "step 52: tf32x3 in NT and TN tuned on an H100 at the wide suite's mid and large shapes that had "
                 "no row in that layout (`mmtune tune --recorded --family wgmma --trials 12`), 19 rows"},
        {"step": "promote", "commit": "step 52 (issue 39)", "file": "h100/step52/gemv/variant-rows.json.xz",
         "what": "step 52: the two gemv records (x @ W.T at M = 2 and 4) timed next to the best config of a sweep "
                 "(32 columns, 512 threads, unroll 4, K split 2); M = 4 faster"},
        {"step": "relabel", "commit": "step 53 (issue 39)", "hashes": STEP53_GEMV,
         "what": "step 53: gemv's few-rows rule for float64 too, the kernels unchanged: the same sm_90 PTX for "
                 "both gemv records (studies/ptx_same.py)"},

        {"step": "promote", "commit": "step 54 (issue 39)", "file": "h100/step54/gemv/tuned.json.xz",
         "what": "step 54: the two gemv records (x @ W.T at M = 2 and 4) tuned again on an H100 with B streamed in "
                 "the space (`mmtune tune --family gemv --layout NT --trials 30`), both streamed and faster"},
        {"step": "relabel", "commit": "step 54 (issue 39)", "hashes": STEP54_GEMV,
         "what": "step 54: gemv's streamed B and A read as vectors, off by default: the same sm_90 PTX for both "
                 "records as on the code they were tuned on"},
        {"step": "relabel", "commit": "step 55 (issue 39)", "hashes": STEP55_HASHES,
         "what": "step 55: wgmma's tiles of any 8 columns and swapped operands, off by default, and the families' "
                 "fit: the same sm_90 PTX for every record (studies/ptx_same.py)"},
        {"step": "promote", "commit": "step 58 (issue 39)", "file": "h100/step58/tune64/tuned.json.xz",
         "what": "step 58: the 18 dmma records tuned again on an H100 on the k-loop without branches, 10 trials "
                 "each (`mmtune tune --recorded`)"},
        {"step": "relabel", "commit": "step 58 (issue 39)", "hashes": STEP58_DOCSTRING,
         "what": "step 58: dmma's docstring after the tuning: the same sm_90 PTX"},
        {"step": "drop", "commit": "step 59 (issue 39)", "family": "dmma", "only": STEP59_H100_MEMORY,
         "what": "step 59: the three float64 records of tiles as they lie in memory, whose code changed (one "
                 "element a load), not timed again: no H100 was lent that session"},
        {"step": "relabel", "commit": "step 59 (issue 39)", "hashes": STEP59_UNPAIRED,
         "what": "step 59: float64 read one element a load: the same sm_90 PTX for the other records"},
        {"step": "relabel", "commit": "step 60 (issue 39)", "hashes": STEP60_PAIRS,
         "what": "step 60: C's paired stores, a parameter off by default: the same sm_90 PTX for every record"},
        {"step": "relabel", "commit": "step 61 (issue 39)", "hashes": STEP61_HASHES,
         "what": "step 61: the families' skinny tile and dmma's 16-wide tiles: the same sm_90 PTX for every record"},
        {"step": "relabel", "commit": "step 62 (issue 39)", "hashes": STEP62_HASHES,
         "what": "step 62: the families' small tile: the same sm_90 PTX for every record"},
        {"step": "relabel", "commit": "step 63 (issue 39)", "hashes": STEP63_HASHES,
         "what": "step 63: the families' small tiles in tiers: the same sm_90 PTX for every record"},
        {"step": "relabel", "commit": "step 64 (issue 39)", "hashes": STEP64_HASHES,
         "what": "step 64: the families' long-K tile: the same sm_90 PTX for every record"},
        {"step": "relabel", "commit": "step 65 (issue 39)", "hashes": STEP65_HASHES,
         "what": "step 65: the small tiers' squarest tile first and a third min_blocks: the same sm_90 PTX for "
                 "every record"},
    ],
}


def read_json(path: Path):
    """A JSON file, xz- or gzip-compressed if its name says so."""
    opener = {".xz": lzma.open, ".gz": gzip.open}.get(path.suffix)
    return json.loads(opener(path, "rt").read() if opener else path.read_text())


def built_table(steps: list[dict], root: Path, loo: bool = False) -> str:
    """The measured table the steps make, as shipped (autotune.select.neighbours.dumps)."""
    from autotune.select.neighbours import dumps, table_of

    table = None
    for step in steps:
        parts = [read_json(root / name) for name in step.get("parts", ())]
        if step["step"] == "table":
            if any(p["tiles"] != parts[0]["tiles"] or p["kernels"] != parts[0]["kernels"] for p in parts):
                raise SystemExit(f"{step['commit']}: the parts were measured with other candidates or kernel code")
            table = table_of({**parts[0], "shapes": [s for p in parts for s in p["shapes"]]}, "9.0", SM_COUNT)
        elif step["step"] == "anchored":
            anchored(table, parts, step["field"])
        elif step["step"] == "extended":
            if gained(parts[0]["tiles"])[:len(table["tiles"])] != table["tiles"]:
                raise SystemExit(f"{step['commit']}: the parts extend other tiles than the table's")
            extended(table, parts, step["field"])
        elif step["step"] == "feasible":
            feasible(table)
        elif step["step"] == "relabel":
            relabelled(table, step["field"], step["hashes"])
        else:
            raise SystemExit(f"unknown table step {step['step']}")
        if loo:
            print(f"  {step['commit']} {step['step']}: {loo_summary(table)}")
    return dumps(table)


def anchored(table: dict, parts: list[dict], field: str) -> list[float]:
    """Replace the table's speeds of the parts' candidates, each shape's scaled by its anchor (the
    table's speed of the anchor over its speed in the part); the parts' kernel hashes go into
    `field`. Returns the scales."""
    measured = {tuple(entry["shape"]): entry["jobs"] for part in parts for entry in part["shapes"]}
    scales = []
    for shape in table["shapes"]:
        jobs = measured.get((shape["m"], shape["n"], shape["k"]))
        anchor = next((j for j in jobs or () if j.get("anchor") and j.get("gflops")), None)
        if anchor is None:
            continue
        scale = shape["gflops"][anchor["anchor"]] / anchor["gflops"]
        scales.append(scale)
        for job in jobs:
            for name in job["candidates"] if job.get("gflops") else ():
                shape["gflops"][name] = round(job["gflops"] * scale, 1)
    table[field] = parts[0]["kernels"]
    return scales


def extended(table: dict, parts: list[dict], field: str) -> None:
    """The parts' tiles (the table's and more) into the table, with their speeds at its shapes
    anchored; the parts' shapes it lacks appended as measured."""
    from autotune.select.neighbours import table_of

    table["tiles"] = gained(parts[0]["tiles"])
    known = {(s["m"], s["n"], s["k"]) for s in table["shapes"]}
    new = [entry for part in parts for entry in part["shapes"] if tuple(entry["shape"]) not in known]
    table["shapes"] += table_of({**parts[0], "shapes": new}, table["cc"], table["sm_count"])["shapes"]
    anchored(table, parts, field)


def gained(tiles: list[dict]) -> list[dict]:
    """The tiles, a family's with the parameters it gained since they were measured, at the values
    that run the code they measured (autotune.store.rows.GAINED)."""
    from autotune.store.rows import GAINED

    return [{**GAINED.get(tile.get("family"), {}), **tile} for tile in tiles]


def relabelled(table: dict, field: str, hashes: dict[str, str]) -> None:
    """The table's tiles as `gained` has them, and `field`'s source hashes of the families in
    `hashes` replaced."""
    table["tiles"] = gained(table["tiles"])
    table[field] = {**table[field], **{family: h for family, h in hashes.items() if family in table[field]}}


def feasible(table: dict) -> None:
    """Drop the speeds of candidates whose config at a shape autotune's space does not admit."""
    from autotune.space.configs import DeviceLimits, infeasibility

    limits = DeviceLimits.for_cc(table["cc"])
    for shape in table["shapes"]:
        shape["gflops"] = {
            name: speed for name, speed in shape["gflops"].items()
            if infeasibility(*candidate_config(table, name, shape), "float32", limits) is None}


def candidate_config(table: dict, name: str, shape: dict) -> tuple[str, dict]:
    """The (family, params) of the table's candidate `name` ("<tile index>:<policy>") at `shape`."""
    from autotune.select.neighbours import config_for

    index, policy = name.split(":")
    return config_for(table["tiles"][int(index)], policy, (shape["m"], shape["n"], shape["k"]), table["sm_count"],
                      table["cc"])


def loo_summary(table: dict) -> str:
    """Per precision: the best candidate over cuBLAS, and the leave-one-out pick over the best
    and over cuBLAS (geometric means), and how many picks fall under 0.75x cuBLAS."""
    import kernels
    from autotune.select.neighbours import leave_one_out
    from autotune.space.precision import allows

    found = []
    for precision in ("ieee", "tf32x3"):
        def feasible_at(shape, precision=precision):
            return lambda family, params: allows(precision, kernels.family(family).precision, shape[2])

        rows = leave_one_out(table, table["sm_count"], feasible_at)
        mean = {key: math.exp(sum(math.log(r[key]) for r in rows) / len(rows)) for key in ("of_best", "vs_cublas")}
        oracle = math.exp(sum(math.log(r["vs_cublas"] / r["of_best"]) for r in rows) / len(rows))
        low = sum(r["vs_cublas"] < 0.75 for r in rows)
        found.append(f"{precision}: best candidate {oracle:.3f}x cuBLAS, leave-one-out pick {mean['of_best']:.3f} "
                     f"of the best, {mean['vs_cublas']:.3f}x cuBLAS, {low} shapes below 0.75x")
    return f"{len(table['shapes'])} shapes, {len(table['tiles'])} tiles; " + "; ".join(found)


def taken(row, step: dict) -> bool:
    """Whether a promote (drop) step takes (drops) `row` (autotune.store.rows.Row): all rows, or `only` those
    named, or all but those `except` names (a shape, or shape@dtype)."""
    shape = "x".join(map(str, row.shape))
    names = {shape, f"{shape}@{row.dtype}"}
    return bool(names & set(step.get("only", names))) and not names & set(step.get("except", ()))


def built_records(steps: list[dict], root: Path, out: Path) -> None:
    """Write the records the steps make to `out` (a new file), as `mmtune promote` writes them."""
    from dataclasses import replace

    from autotune.store.records import promote
    from autotune.store.rows import Row

    rows: dict[tuple, Row] = {}
    for step in steps:
        if step["step"] == "promote":
            for row in map(Row.of, read_json(root / step["file"])):
                if taken(row, step):
                    rows[row.key] = row
        elif step["step"] == "relabel":
            rows = {key: replace(row, source_hash=step["hashes"].get(row.family, row.source_hash))
                    for key, row in rows.items()}
        elif step["step"] == "drop":
            kept = {key: row for key, row in rows.items() if row.family != step["family"] or not taken(row, step)}
            if len(kept) == len(rows):
                raise SystemExit(f"{step['commit']}: the drop step matches no row")
            rows = kept
        else:
            raise SystemExit(f"unknown records step {step['step']}")
    out.unlink(missing_ok=True)
    promote(list(rows.values()), out)


def rebuild(out: Path, loo: bool = False) -> list[Path]:
    """Write every file of SHIPPED under `out`; returns their paths."""
    written = []
    for name, steps in SHIPPED.items():
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.startswith("measured/"):
            if loo:
                print(name)
            path.write_bytes(lzma.compress(built_table(steps, STUDIES, loo).encode(), preset=9))
        else:
            built_records(steps, STUDIES, path)
        written.append(path)
    return written


def rebuild_main(args: argparse.Namespace) -> int:
    if args.check or args.out is None:
        with tempfile.TemporaryDirectory(prefix="mmtune-rebuild-") as directory:
            return compare(rebuild(Path(directory), args.loo), Path(directory))
    for path in rebuild(Path(args.out), args.loo):
        print(f"wrote {path}")
    return 0


def shipped_text(path: Path) -> bytes:
    """A shipped file's contents, decompressed if its name says xz (the compressed bytes may differ
    between liblzma versions)."""
    return lzma.decompress(path.read_bytes()) if path.suffix == ".xz" else path.read_bytes()


def compare(paths: list[Path], root: Path) -> int:
    differ = [p.relative_to(root) for p in paths if shipped_text(p) != shipped_text(DATA / p.relative_to(root))]
    for name in differ:
        print(f"differs from autotune/data: {name}")
    print(f"{len(paths) - len(differ)} of {len(paths)} shipped files rebuilt byte for byte")
    return 1 if differ else 0


# -- jobs ------------------------------------------------------------------------------------------

#: more tiles for skinny shapes, before fitting: the long side at 64, 128 and 256, BK 16 and 32
SKINNY_VARIANTS = [
    {"bm": 128, "bn": 128, "bk": 16, "tm": 8, "tn": 8},
    {"bm": 64, "bn": 64, "bk": 32, "tm": 4, "tn": 4},
    {"bm": 256, "bn": 256, "bk": 16, "tm": 8, "tn": 8},
    {"bm": 128, "bn": 128, "bk": 32, "tm": 4, "tn": 4},
]
CHANGED = ("stream", "unaligned", "unaligned-c", "wgmma-unaligned", "wgmma-fit")
#: the sizes of `extend --odd-count`'s shapes: large products, which the seeded shapes' odd ones
#: seldom are
ODD_RANGE = (1024, 8192)


def tile_of(params: dict) -> dict:
    return {k: v for k, v in params.items() if k != "splits"}


def job(family: str, params: dict, dtype: str, shape: tuple, source: str) -> dict:
    return {"family": family, "params": params, "dtype": dtype, "shape": list(shape), "source": source,
            "tile": json.dumps(tile_of(params), sort_keys=True) if family in ("vector", "splitk") else None,
            "policy": "split" if params.get("splits", 1) > 1 else "whole"}


def record_jobs(dtype: str | None) -> list[dict]:
    from autotune.store.records import shipped_rows

    return [job(r.family, r.params, r.dtype, r.shape, "record") for r in shipped_rows(None, dtype) if r.layout == "NN"]


def skinny_shapes(seed: int, count: int) -> list[tuple[int, int, int]]:
    """`count` skinny shapes: the short side log-uniform in 1..SKINNY, the others in SIZE_RANGE,
    the short side M or N by turns."""
    from autotune.bench.peers import SIZE_RANGE
    from autotune.space.guesses import SKINNY

    rng = random.Random(seed)
    low, high = SIZE_RANGE
    shapes = []
    while len(shapes) < count:
        short = round(SKINNY ** rng.random())
        long_side, k = (round(low * (high / low) ** rng.random()) for _ in range(2))
        shape = (short, long_side, k) if len(shapes) % 2 == 0 else (long_side, short, k)
        if shape not in shapes:
            shapes.append(shape)
    return shapes


def odd_shapes(seed: int, count: int) -> list[tuple[int, int, int]]:
    """`count` shapes of large products whose rows are not 16-byte aligned: M, N and K each
    log-uniform in ODD_RANGE, redrawn until N or K is not a multiple of 4."""
    rng = random.Random(seed)
    low, high = ODD_RANGE
    shapes = []
    while len(shapes) < count:
        shape = tuple(round(low * (high / low) ** rng.random()) for _ in range(3))
        if (shape[1] % 4 or shape[2] % 4) and shape not in shapes:
            shapes.append(shape)
    return shapes


def candidate_tiles() -> tuple[list[dict], int]:
    """The candidate tiles (the shipped records', then the rule's, then SKINNY_VARIANTS) and how
    many of them, from the start, every shape tries."""
    from autotune.space.guesses import FEW_TILE, PIPELINE, SKINNY_TILE
    from autotune.store.records import shipped_rows

    tiles = []
    for row in shipped_rows(None, "float32"):
        if row.layout == "NN" and row.family in ("vector", "splitk"):
            tile = tile_of(row.params)
            if tile not in tiles:
                tiles.append(tile)
    for extra in (SKINNY_TILE, FEW_TILE):
        tile = {**PIPELINE, **extra}
        if tile not in tiles:
            tiles.append(tile)
    everywhere = len(tiles)
    return tiles + [{**PIPELINE, **v} for v in SKINNY_VARIANTS], everywhere


def training_jobs(shapes: list[tuple], tiles: list[dict], everywhere) -> list[dict]:
    """Every candidate at `shapes`: at skinny shapes every tile, at others those of `everywhere`
    (indices), under every policy their schedules have; and lookup's own pick."""
    from autotune.backends import Device
    from autotune.select.lookup import lookup
    from autotune.select.neighbours import candidate_name, config_for, policies_for
    from autotune.space.configs import DeviceLimits, infeasibility
    from autotune.space.guesses import SKINNY
    from kernels.base import Config

    limits = DeviceLimits.for_cc("9.0")
    device = Device("NVIDIA H200", "9.0", SM_COUNT)
    jobs = []
    for shape in shapes:
        found: dict[str, dict] = {}
        for index, tile in enumerate(tiles):
            if index not in everywhere and min(shape[:2]) > SKINNY:
                continue
            for policy in policies_for(tile):
                family, params = config_for(tile, policy, tuple(shape), SM_COUNT, "9.0")
                if infeasibility(family, params, "float32", limits) is not None:
                    continue  # lookup passes it over too
                key = Config.of(family, params).key
                found.setdefault(key, {"family": family, "params": params, "dtype": "float32", "shape": list(shape),
                                       "candidates": []})
                found[key]["candidates"].append(candidate_name(index, policy))
        choice = lookup(*shape, "float32", device)
        key = Config.of(choice.family, choice.config).key
        found.setdefault(key, {"family": choice.family, "params": choice.config, "dtype": "float32",
                               "shape": list(shape), "candidates": []})
        found[key]["lookup"] = choice.source
        jobs += found.values()
    return jobs


def changed_by(what: str):
    """Whether the code of a candidate (family, params) changed, as `retime --changed what` says."""
    from kernels.rules import adds_into_c

    if what == "unaligned":
        return lambda family, params: bool(params.get("wide_fetch") and not params.get("async_copy"))
    if what == "unaligned-c":
        return lambda family, params: adds_into_c(params)
    if what == "wgmma-unaligned":
        from kernels.wgmma_space import STRAIGHT_PRODUCERS

        return lambda family, params: family == "wgmma" and params.get("producer") in STRAIGHT_PRODUCERS
    if what == "wgmma-fit":
        from kernels.wgmma_space import ROLLED_WIDTHS

        return lambda family, params: family == "wgmma" and params["bn"] not in ROLLED_WIDTHS
    raise ValueError(what)


def added_jobs(table: dict, shape: dict, tiles: list[tuple[int, dict]], policies: tuple[str, ...] = ()) -> list[dict]:
    """The candidates of `tiles` (index, tile) under `policies` (default: every policy a tile's
    schedules have) at `shape`, and the table's best candidate there as the anchor."""
    from autotune.select.neighbours import candidate_name, config_for, policies_for
    from autotune.space.configs import DeviceLimits, infeasibility
    from kernels.base import Config

    limits = DeviceLimits.for_cc("9.0")
    m, n, k = shape["m"], shape["n"], shape["k"]
    found: dict[str, dict] = {}
    for index, tile in tiles:
        for policy in policies or policies_for(tile):
            family, params = config_for(tile, policy, (m, n, k), SM_COUNT, "9.0")
            if infeasibility(family, params, "float32", limits) is not None:
                continue
            key = Config.of(family, params).key
            found.setdefault(key, {"family": family, "params": params, "dtype": "float32", "shape": [m, n, k],
                                   "candidates": []})
            found[key]["candidates"].append(candidate_name(index, policy))
    best = max(shape["gflops"], key=shape["gflops"].get)
    family, params = candidate_config(table, best, shape)
    found.setdefault(Config.of(family, params).key, {"family": family, "params": params, "dtype": "float32",
                                                     "shape": [m, n, k], "candidates": []})["anchor"] = best
    return list(found.values())


def family_tiles(name: str) -> list[dict]:
    """A family's candidate tiles for the table: those of its shipped float32 rows (any GPU and
    layout), each with every BM and BN of its space, named by "family"."""
    from itertools import product

    import kernels
    from autotune.store.records import shipped_rows
    from kernels.base import Schedules

    space = kernels.family(name).space
    tiles = []
    for row in shipped_rows(None, "float32"):
        if row.family == name:
            for bm, bn in product(space["bm"], space["bn"]):
                tile = {"family": name, **Schedules.tile_of(row.params), "bm": bm, "bn": bn}
                if tile not in tiles:
                    tiles.append(tile)
    return tiles


def changed_jobs(table: dict, shape: dict, changed) -> list[dict]:
    """The jobs timing the candidates at `shape` for which changed(family, params) holds, and as
    the anchor the best of the others; none where all or none of them changed."""
    from kernels.base import Config

    m, n, k = shape["m"], shape["n"], shape["k"]
    found: dict[str, dict] = {}

    def job_for(name: str) -> dict:
        family, params = candidate_config(table, name, shape)
        return found.setdefault(Config.of(family, params).key, {
            "family": family, "params": params, "dtype": "float32", "shape": [m, n, k], "candidates": []})

    for name in shape["gflops"]:
        if changed(*candidate_config(table, name, shape)):
            job_for(name)["candidates"].append(name)
    others = [name for name in shape["gflops"] if not changed(*candidate_config(table, name, shape))]
    if found and others:
        best = max(others, key=shape["gflops"].get)
        job_for(best)["anchor"] = best
    return list(found.values()) if others else []


def retime_jobs(table: dict, what: str, part: str, within: float) -> list[dict]:
    """The jobs of `retime --changed what` on part `part` ("I/N") of the table's shapes."""
    if what == "stream":
        from autotune.select.neighbours import STREAM

        tiles = list(enumerate(table["tiles"]))
        return [j for shape in part_of(table["shapes"], part) for j in added_jobs(table, shape, tiles, (STREAM,))]
    changed = changed_by(what)
    if what == "wgmma-fit":
        return [j for shape in part_of(table["shapes"], part) for j in changed_jobs(table, shape, changed)]
    if what in ("unaligned", "wgmma-unaligned"):
        shapes = [s for s in table["shapes"] if s["n"] % 4 or s["k"] % 4]
        return [j for shape in part_of(shapes, part) for j in changed_jobs(table, shape, changed)]
    shapes = [s for s in table["shapes"] if s["n"] % 4]
    return [j for shape in part_of(shapes, part) for j in changed_jobs(table, shape, changed)
            if j.get("anchor") or max(shape["gflops"][name] for name in j["candidates"])
            >= within * max(shape["gflops"].values())]


def part_of(shapes: list, part: str) -> list:
    """The shapes of part "I/N": every N-th from the I-th."""
    index, parts = map(int, part.split("/"))
    return shapes[index::parts]


# -- building and timing ---------------------------------------------------------------------------

def store_key(key: tuple):
    """The kernel store's key (autotune.store.cubins.BuildKey) of a `build_key`, for ARCH."""
    from autotune.store.cubins import BuildKey
    from kernels import Config
    from kernels.rules import Arch

    family, params, dtype, bits, unaligned, layout = key
    return BuildKey(Config.of(family, json.loads(params)), dtype, Arch.of(ARCH).native, layout=layout,
                    offset_bits=bits, unaligned=unaligned)


def build_key(j: dict) -> tuple:
    """What a job's kernel is built as: for its shape and layout (a job's "layout", default NN),
    or for the operands a job's `unaligned` names."""
    from kernels.rules import offset_bits_for, unaligned_for

    m, n, k = j["shape"]
    layout = j.get("layout", "NN")
    return (j["family"], json.dumps(j["params"], sort_keys=True), j["dtype"], offset_bits_for(m, n, k),
            j.get("unaligned", unaligned_for(m, n, k, layout, j["dtype"])), layout)


def _build(key: tuple, root: str) -> tuple[tuple, str | None, float]:
    from autotune.store import cubins

    family, params, dtype, bits, unaligned, layout = key
    started = time.perf_counter()
    try:
        cubins.get(store_key(key), Path(root))
        return key, None, time.perf_counter() - started
    except Exception as error:  # noqa: BLE001 - a config that does not build is reported, not fatal
        return key, str(error).splitlines()[0][:300], time.perf_counter() - started


def build_all(jobs: list[dict], root: Path, workers: int) -> dict[tuple, str | None]:
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    keys = sorted({build_key(j) for j in jobs})
    started = time.perf_counter()
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        results = list(pool.map(_build, keys, [str(root)] * len(keys)))
    seconds = [s for _, _, s in results]
    print(f"built {len(keys)} kernels in {time.perf_counter() - started:.0f} s on {workers} processes "
          f"(median {statistics.median(seconds) if seconds else 0:.1f} s each)", flush=True)
    return {key: error for key, error, _ in results}


def operands(torch, m: int, n: int, k: int, dtype: str, seed: int, layout: str = "NN"):
    """Random A and B, each a transposed view of a C-contiguous array where `layout` says "T"."""
    import numpy as np

    from autotune.bench.accuracy import Operands, checked_rows
    from autotune.measure.measurement import error_bound, reference

    kind = getattr(torch, dtype)
    generator = torch.Generator(device="cuda").manual_seed(seed)
    A = torch.randn((k, m) if layout[0] == "T" else (m, k), generator=generator, device="cuda", dtype=kind)
    B = torch.randn((n, k) if layout[1] == "T" else (k, n), generator=generator, device="cuda", dtype=kind)
    A, B = (A.T if layout[0] == "T" else A), (B.T if layout[1] == "T" else B)
    rows = checked_rows(m, n, k, np.random.default_rng(seed))
    A_rows = A[torch.as_tensor(rows, device=A.device)] if isinstance(rows, np.ndarray) else A
    expected = reference(A_rows.cpu().numpy(), B.cpu().numpy())
    return Operands(A, B, torch.empty((m, n), device="cuda", dtype=kind), rows, expected, error_bound(dtype, k))


def graph_calls(torch, call) -> int:
    """How many calls one CUDA graph sample holds: about GRAPH_SAMPLE_SECONDS of them, by one call
    timed on CUDA events."""
    from autotune.bench.peers import GRAPH_SAMPLE_SECONDS, MAX_GRAPH_CALLS

    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    stop.record()
    stop.synchronize()
    once = max(start.elapsed_time(stop) * 1e-3, 1e-6)
    return max(1, min(MAX_GRAPH_CALLS, round(GRAPH_SAMPLE_SECONDS / once)))


def timed(device, call, ops) -> tuple[float | None, str | None, float]:
    """Median seconds per call over CUDA-graph samples, or None and why; and the product's
    relative error."""
    device.poison(ops.C)
    call()
    device.sync()
    error = ops.error(device.to_host(ops.C))
    if not error <= ops.bound:
        return None, f"wrong product: relative error {error:.2e} > {ops.bound:.2e}", error
    timer = device.kernel_timer(call, ops, graph_calls(device.torch, call))
    return statistics.median(timer.sample() for _ in range(SAMPLES)), None, error


def time_job(device, gpu, root: Path, failed: dict, j: dict, ops) -> None:
    """Time job `j` on `ops` through the driver plan of its stored kernel: sets its error, or its
    registers, relative error and GFLOPS."""
    import torch

    from autotune.call import front
    from autotune.errors import LaunchError
    from autotune.store import cubins

    j["error"] = failed.get(build_key(j))
    if j["error"]:
        return
    entry = cubins.read(cubins.key_parts(store_key(build_key(j)), root), root)
    m, n, k = j["shape"]
    j["registers"] = entry.header.get("registers")
    try:
        plan = front.entry_plan(gpu, entry, (m, n, k), j["dtype"], j.get("layout", "NN"))
    except LaunchError as error:  # a build this GPU cannot load or launch (its shared memory): the job's verdict
        j["error"] = str(error)
        return
    seconds, j["error"], j["relative_error"] = timed(
        device, lambda: plan.launch(ops.A.data_ptr(), ops.B.data_ptr(), ops.C.data_ptr(),
                                    torch.cuda.current_stream().cuda_stream), ops)
    j["gflops"] = 2 * m * n * k / seconds / 1e9 if seconds else None


def timed_shapes(device, jobs: list[dict], root: Path, failed: dict, deadline: float):
    """Per shape, dtype and layout (a job's "layout", default NN) of `jobs`, in order: cuBLAS and
    then every job timed on one set of operands (time_job); yields ((shape, dtype), jobs, cuBLAS
    GFLOPS or None, seconds taken). Starts no shape after `deadline` (time.perf_counter)."""
    import torch

    from autotune.backends import launch

    gpu = launch.device(torch.cuda.current_device())
    by_shape: dict[tuple, list[dict]] = {}
    for j in jobs:
        by_shape.setdefault((tuple(j["shape"]), j["dtype"], j.get("layout", "NN")), []).append(j)
    for index, ((shape, dtype, layout), group) in enumerate(by_shape.items()):
        if time.perf_counter() > deadline:
            print(f"time is up: {len(by_shape) - index} shapes not timed", flush=True)
            return
        started = time.perf_counter()
        m, n, k = shape
        ops = operands(torch, m, n, k, dtype, seed=index, layout=layout)
        blas, _, _ = timed(device, lambda: torch.matmul(ops.A, ops.B, out=ops.C), ops)
        for j in group:
            time_job(device, gpu, root, failed, j, ops)
        yield (shape, dtype), group, 2 * m * n * k / blas / 1e9 if blas else None, time.perf_counter() - started


def run(jobs: list[dict], args: argparse.Namespace, head: dict, began: float, line) -> None:
    """Build and time `jobs`; after every shape, print line(shape, group, cuBLAS GFLOPS, seconds)
    and write {**head, device, kernels, shapes} to --out."""
    root = Path(args.store or tempfile.mkdtemp(prefix="mmtune-table-"))
    failed = build_all(jobs, root, args.jobs)

    from autotune.bench.peers import category
    from autotune.bench.torch_device import TorchDevice
    from kernels import source_hashes

    device = TorchDevice()
    result = {"device": device.name, **head, "kernels": source_hashes(), "shapes": []}
    for (shape, dtype), group, blas, seconds in timed_shapes(device, jobs, root, failed, began + args.seconds):
        result["shapes"].append({"shape": list(shape), "dtype": dtype, "category": category(*shape),
                                 "cublas_gflops": blas, "jobs": group})
        print(line(shape, group, blas or math.nan, seconds), flush=True)
        Path(args.out).write_text(json.dumps(result, indent=0))
    print(f"done in {time.perf_counter() - began:.0f} s", flush=True)


def best_line(label: str):
    """A shape's line: cuBLAS, the best job (its candidates or source), the anchor or lookup's pick."""
    def line(shape, group, blas, seconds) -> str:
        done = [j for j in group if j.get("gflops")]
        best = max(done, key=lambda j: j["gflops"]) if done else None
        named = (",".join(best.get("candidates") or [])[:40] or best.get("source") or best["family"]) if best else "-"
        anchor = next((j for j in group if j.get("anchor")), None)
        pick = next((j for j in group if j.get("lookup") or j.get("source") == "record"), None)
        other = (f"anchor {anchor['anchor']} {(anchor.get('gflops') or 0) / blas:5.3f}" if anchor else
                 f"pick {(pick.get('gflops') or 0) / blas:5.3f}" if pick else "")
        return (f"{'x'.join(map(str, shape)):>16} cuBLAS {blas:8.0f}  best {label} "
                f"{best['gflops'] / blas if best else 0:5.3f} ({named})  {other}  {len(done)}/{len(group)} ran"
                f"  {seconds:4.1f} s")
    return line


def measure_main(args: argparse.Namespace) -> None:
    from autotune.bench.peers import seeded_shapes
    from autotune.store.records import suites

    began = time.perf_counter()
    held_out = {tuple(map(int, s.split("x"))) for listed in suites().values() for s in listed}
    shapes = [tuple(map(int, s.split("x"))) for s in args.shapes]
    shapes += [s for seed in args.seeds for s in seeded_shapes(seed, args.count)]
    shapes += skinny_shapes(args.skinny, args.skinny_count)
    shapes = part_of([s for s in dict.fromkeys(shapes) if s not in held_out], args.part)
    tiles, everywhere = candidate_tiles()
    jobs = training_jobs(shapes, tiles, range(everywhere))
    print(f"{len(shapes)} shapes, {len(tiles)} tiles, {len(jobs)} jobs, {len({build_key(j) for j in jobs})} builds",
          flush=True)
    if not args.dry:
        run(jobs, args, {"tiles": tiles}, began, best_line("candidate"))


def retime_main(args: argparse.Namespace) -> None:
    began = time.perf_counter()
    table = read_json(Path(args.table))
    jobs = retime_jobs(table, args.changed, args.part, args.within)
    print(f"{len(jobs)} jobs at {len({tuple(j['shape']) for j in jobs})} shapes", flush=True)
    if args.dry:
        Path(args.out).write_text(json.dumps(jobs, indent=0))
    else:
        run(jobs, args, {"changed": args.changed}, began, best_line(args.changed))


def extend_main(args: argparse.Namespace) -> None:
    from autotune.space.guesses import SKINNY

    began = time.perf_counter()
    table = read_json(Path(args.table))
    added = (family_tiles(args.family) if args.family else []) + [json.loads(tile) for tile in args.tile]
    tiles = table["tiles"] + [tile for tile in added if tile not in table["tiles"]]
    new = [(index, tile) for index, tile in enumerate(tiles) if tile in added]
    jobs = [j for shape in part_of(table["shapes"], args.part) for j in added_jobs(table, shape, new)] if new else []
    if args.odd_count:
        known = {(s["m"], s["n"], s["k"]) for s in table["shapes"]}
        shapes = part_of([s for s in odd_shapes(args.odd, args.odd_count) if s not in known], args.part)
        everywhere = {int(name.split(":")[0]) for s in table["shapes"] if min(s["m"], s["n"]) > SKINNY
                      for name in s["gflops"]} | {index for index, _ in new}
        jobs += training_jobs(shapes, tiles, everywhere)
    builds = len({build_key(j) for j in jobs})
    print(f"{len(new)} tiles, {len(jobs)} jobs, {builds} builds", flush=True)
    if args.dry:
        Path(args.out).write_text(json.dumps(jobs, indent=0))
    else:
        run(jobs, args, {"tiles": tiles, "family": args.family}, began, best_line("extended"))


def records_main(args: argparse.Namespace) -> None:
    run(record_jobs(args.dtype), args, {"label": args.label}, time.perf_counter(), best_line("record"))


def jobs_main(args: argparse.Namespace) -> None:
    jobs = [{"source": "jobs", **j, "shape": list(j["shape"])} for j in read_json(Path(args.file))]
    run(jobs, args, {}, time.perf_counter(), best_line("job"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("rebuild", help="the shipped data from studies/ (CPU)")
    build.add_argument("--out", help="write measured/ and records/ under this folder (autotune/data to ship)")
    build.add_argument("--check", action="store_true", help="rebuild into a temporary folder and compare with autotune/data")
    build.add_argument("--loo", action="store_true", help="print the table's leave-one-out accuracy after each step")
    for name, text in (("measure", "every candidate at the training shapes"),
                       ("retime", "some of the shipped table's candidates again, anchored"),
                       ("extend", "a family's tiles added to the shipped table, anchored"),
                       ("records", "every shipped record's config at its shape"),
                       ("jobs", "a JSON list of jobs")):
        sub = commands.add_parser(name, help=text)
        sub.add_argument("--out", required=True)
        sub.add_argument("--store", help="the kernel store (default a temporary directory)")
        sub.add_argument("--jobs", type=int, default=16, help="processes building kernels")
        sub.add_argument("--seconds", type=float, default=1e9, help="start no shape after this long")
        if name == "measure":
            sub.add_argument("--seeds", type=int, nargs="*", default=[])
            sub.add_argument("--count", type=int, default=20)
            sub.add_argument("--shapes", nargs="*", default=[], help="more training shapes, like 1000x1000x1000")
            sub.add_argument("--skinny", type=int, default=7)
            sub.add_argument("--skinny-count", type=int, default=0)
        if name in ("measure", "retime", "extend"):
            sub.add_argument("--part", default="0/1")
            sub.add_argument("--dry", action="store_true",
                             help="count the jobs (retime, extend: write them to --out), then stop")
        if name in ("retime", "extend"):
            sub.add_argument("--table", default=str(DATA / "measured" / "nvidia-h200.json.xz"))
        if name == "extend":
            sub.add_argument("--family", help="a family whose tiles (family_tiles) to add at every shape")
            sub.add_argument("--tile", action="append", default=[],
                             help='a tile to add at every shape, as JSON with its "family"')
            sub.add_argument("--odd-count", type=int, default=0, help="shapes (odd_shapes) to add with every tile")
            sub.add_argument("--odd", type=int, default=11, help="odd_shapes' seed")
        if name == "retime":
            sub.add_argument("--changed", choices=CHANGED, required=True)
            sub.add_argument("--within", type=float, default=0.6, help="unaligned-c: candidates this close to the best")
        if name == "records":
            sub.add_argument("--dtype")
            sub.add_argument("--label", default="")
        if name == "jobs":
            sub.add_argument("file", help="the JSON list of jobs")
    args = parser.parse_args()
    if args.command == "rebuild":
        return rebuild_main(args)
    {"measure": measure_main, "retime": retime_main, "extend": extend_main, "records": records_main,
     "jobs": jobs_main}[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
