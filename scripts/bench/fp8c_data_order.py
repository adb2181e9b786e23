"""fp8c's training-data order, ported to Python (standard library only), so that a PyTorch
reference trains on the very windows, in the very order, that `fp8c train --text FILE
--seq-len T --batch B --seed S` (or `--data`) does: `fp8c_session::train::data`'s
`permutation` (a Fisher-Yates shuffle from a SplitMix64-seeded xorshift, one per epoch) and
`batch_rows` (batches taken in order across epoch boundaries).

Imported by scripts/bench/lm_parity_torch.py and scripts/bench/e2e_torch.py; not a command.
"""

M64 = (1 << 64) - 1


def splitmix64(x):
    """SplitMix64's finaliser (`fp8c_session::train::data::splitmix64`)."""
    z = (x + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def permutation(n, seed, epoch):
    """The shuffle of rows 0..n for (seed, epoch)."""
    s = splitmix64((splitmix64(seed) + epoch) & M64) | 1
    p = list(range(n))
    for i in range(n - 1, 0, -1):
        s ^= (s << 13) & M64
        s ^= s >> 7
        s ^= (s << 17) & M64
        j = s % (i + 1)
        p[i], p[j] = p[j], p[i]
    return p


def batch_rows(rows, batch, seed, step, cache={}):  # noqa: B006 - the cache is the point
    """The rows step `step` trains on; depends only on (rows, batch, seed, step)."""
    out = []
    for k in range(batch):
        pos = step * batch + k
        epoch, at = divmod(pos, rows)
        key = (rows, seed, epoch)
        if key not in cache:
            cache[key] = permutation(rows, seed, epoch)
        out.append(cache[key][at])
    return out


def text_windows(data, seq_len):
    """`--text`'s windows: (n, inputs, labels) with inputs[i] = data[i*T:(i+1)*T] and labels
    the same bytes shifted by one; a trailing part shorter than a window is dropped."""
    n = (len(data) - 1) // seq_len
    return n, data[: n * seq_len], data[1 : n * seq_len + 1]
