"""The split-KV schedule's configuration and arithmetic (`ScheduleConfig`, the Python mirror of the schedule the
decode kernels compute on the device, the launch rows it needs), apart from the planning in `_config` (which picks a
ScheduleConfig for a decode config, `split_schedule`; one owner per file; re-exported there)."""

from __future__ import annotations

from dataclasses import dataclass

NO_SPLIT_CHUNK = 1 << 30
PAIR_GROUPS = (2, 4, 8)  # DecodeConfig.cluster with cluster_pairs: the items of one request a cluster takes


@dataclass(frozen=True)
class ScheduleConfig:
    """tile_keys: split granularity (keys a decode CTA covers per round); target_items: the most
    items a split batch makes (chunk = total / (target_items - B): each request's round-up adds at
    most one item); a batch of B >= target_items is not split; min_chunk: the shortest chunk (keys).
    pairs (`DecodeConfig.cluster_pairs`): while `paired`, cap keeps group - 1 rows a request free and every
    request's item count is rounded up to a multiple of group (empty last items if need be): its items start on a
    row that is a multiple of group. group: the items a cluster takes (its size: 2 pairs, 4 or 8 groups).
    budget (`DecodeConfig.pair_budget`): a paired batch's split counts the rounding, min(target, cap - (group - 1)
    B) - group B items beyond one a request, so its items (and launch rows) stay within min(target, cap - (group -
    1) B) instead of that plus (group - 1) B."""

    tile_keys: int = 64
    target_items: int = 264
    min_chunk: int = 256
    pairs: bool = False
    group: int = 2
    budget: bool = False

    def __repr__(self) -> str:  # group only when not 2, budget when set: the repr (and compile keys) of pairs stay
        extra = f", group={self.group}" if self.group != 2 else ""
        extra += ", budget=True" if self.budget else ""
        return (
            f"ScheduleConfig(tile_keys={self.tile_keys}, target_items={self.target_items}, "
            f"min_chunk={self.min_chunk}, pairs={self.pairs}{extra})"
        )


def _ceil_div(a, b):
    return (a + b - 1) // b


def why_not_schedule(config) -> str | None:
    """None when `config` is a usable ScheduleConfig, else why not (any values >= 1 are correct: the
    decode kernel masks keys outside its item's range, so a chunk need not align to anything)."""
    if not isinstance(config, ScheduleConfig):
        return f"schedule must be a ScheduleConfig, got {type(config).__name__}"
    for name in ("tile_keys", "target_items", "min_chunk"):
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return f"ScheduleConfig.{name} must be an int >= 1, got {value!r}"
    if not isinstance(config.pairs, bool):
        return f"ScheduleConfig.pairs must be a bool, got {config.pairs!r}"
    if not isinstance(config.budget, bool):
        return f"ScheduleConfig.budget must be a bool, got {config.budget!r}"
    if isinstance(config.group, bool) or config.group not in PAIR_GROUPS:
        return f"ScheduleConfig.group must be one of {PAIR_GROUPS}, got {config.group!r}"
    return None


def _request_split(length, chunk, tile, paired: bool = False, group: int = 2):
    """(n_items, chunk_len) of one request: equal chunks, each a multiple of `tile` keys (paired: counts a multiple
    of group)."""
    items, size = 1, tile
    grouped = lambda n: _ceil_div(n, group) * group if paired else n  # noqa: E731
    if length > 0:
        n = grouped(_ceil_div(length, chunk))
        size = _ceil_div(_ceil_div(length, n), tile) * tile
        items = _ceil_div(length, size)
    return grouped(items), size


def paired(batch: int, cap: int, config: ScheduleConfig) -> bool:
    """Whether `ScheduleConfig.pairs` schedules this live batch in pairs (its docstring)."""
    return config.pairs and config.group * batch <= min(config.target_items, cap - (config.group - 1) * batch)


def chunk_size(total: int, batch: int, cap: int, config: ScheduleConfig) -> int:
    grouped = paired(batch, cap, config)
    room = cap - (config.group - 1) * batch if grouped else cap
    target = min(config.target_items, room) - batch - ((config.group - 1) * batch if grouped and config.budget else 0)
    if target <= 0:
        return NO_SPLIT_CHUNK
    chunk = max(config.min_chunk, _ceil_div(total, target))
    return _ceil_div(chunk, config.tile_keys) * config.tile_keys


def schedule_reference(seqlens, window_left: int, cap: int, config: ScheduleConfig):
    """The schedule kernel's output in Python: (work rows, request rows, item count)."""
    lens = [int(n) for n in seqlens]
    visible = [n if window_left < 0 else min(n, window_left + 1) for n in lens]
    chunk = chunk_size(sum(visible), len(lens), cap, config)
    pairs = paired(len(lens), cap, config)
    work, reqs = [], []
    for b, (n, length) in enumerate(zip(lens, visible)):
        items, size = _request_split(length, chunk, config.tile_keys, pairs, config.group)
        reqs.append((len(work), items))
        lo = n - length
        for c in range(items):
            work.append((b, lo + c * size, min(lo + (c + 1) * size, n), int(items > 1)))
    return work, reqs, len(work)


def launch_rows(batch: int, cap: int, config: ScheduleConfig) -> int:
    """CTA rows a KV head of the fused one-launch decode for a live batch of `batch` requests and `cap` work rows
    (`DecodeConfig.full_grid` off): the most items `schedule_reference` can make, so no row is dead by
    construction. Unsplit (min(target, cap) <= batch): batch. Split: each request's count is at most
    len / chunk + 1 and chunk >= total / (target' = min(target, cap) - batch), so the sum is at most min(target,
    cap). Paired: target' = min(target, cap - batch) - batch and every count gains at most one (the rounding to
    even), so min(target, cap - batch) + batch; groups of C (`ScheduleConfig.group`): cap keeps C - 1 rows a request
    and each count gains at most C - 1, so min(target, cap - (C - 1) batch) + (C - 1) batch. The pairs' launch
    rounds that up to whole clusters."""
    if paired(batch, cap, config):  # budget: the split counted the rounding (`ScheduleConfig.budget`)
        spare = (config.group - 1) * batch
        return min(config.target_items, cap - spare) + (0 if config.budget else spare)
    return max(batch, min(config.target_items, cap))


def persistent_grid_rows(rows: int, config: ScheduleConfig) -> int:
    """Grid rows (per KV head) of the persistent decode kernel: one wave of resident CTAs
    (`split_schedule`'s target_items), never more than the launched work rows."""
    return max(1, min(rows, config.target_items))


def persistent_items(cta_row: int, rows: int, config: ScheduleConfig) -> list[int]:
    """Work rows CTA row `cta_row` of the persistent decode kernel runs, in order (a fixed stride: no
    counter to reset between graph replays); rows past the live item count exit at once."""
    return list(range(cta_row, rows, persistent_grid_rows(rows, config)))


def early_page_lines(width: int) -> int:
    """`DecodeConfig.early_pages`: prefetched lines a page-table row of `width` entries gets: one per 32
    entries, plus one for the row's last entry (a row need not start on a 128-byte line)."""
    return (width + 31) // 32 + 1


def early_page_entry(line: int, batch: int, width: int):
    """(row, entry) of the page table [batch, width] whose 128-byte line flat `line` prefetches (the
    kernel's thread tidx of CTA (KV head kvh, row y) takes line tidx + threads x (y x Hkv + kvh)), or
    None past the table. Entries 0, 32, 64, ... and width - 1 of a row touch every line it spans."""
    per_row = early_page_lines(width)
    if width < 1 or line >= batch * per_row:
        return None
    row = line // per_row
    return row, min((line - row * per_row) * 32, width - 1)
