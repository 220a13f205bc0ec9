"""float64 numpy references of im2col / col2im, diag_embed and pixel_shuffle, written as loops over
the definitions (torch.nn.functional's docs), shared by the CPU and the kernel tests."""
import numpy as np


def blocks(size, kernel, dilation, padding, stride):
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def taps(c, kernel, dilation, stride, lh, lw):
    """(column row, window, padded y, padded x) of every tap of every window, by the definition."""
    (kh, kw), (dh, dw), (sh, sw) = kernel, dilation, stride
    for ci in range(c):
        for i in range(kh):
            for j in range(kw):
                for a in range(lh):
                    for b in range(lw):
                        yield ci, (ci * kh + i) * kw + j, a * lw + b, a * sh + i * dh, b * sw + j * dw


def im2col(x, kernel, dilation, padding, stride):
    n, c, h, w = x.shape
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = kernel, dilation, padding, stride
    lh, lw = blocks(h, kh, dh, ph, sh), blocks(w, kw, dw, pw, sw)
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    out = np.zeros((n, c * kh * kw, lh * lw))
    for ci, row, window, y, x_ in taps(c, kernel, dilation, stride, lh, lw):
        out[:, row, window] = padded[:, ci, y, x_]
    return out


def col2im(cols, output_size, kernel, dilation, padding, stride):
    n, rows, _ = cols.shape
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = kernel, dilation, padding, stride
    h, w = output_size
    c = rows // (kh * kw)
    lh, lw = blocks(h, kh, dh, ph, sh), blocks(w, kw, dw, pw, sw)
    padded = np.zeros((n, c, h + 2 * ph, w + 2 * pw))
    for ci, row, window, y, x_ in taps(c, kernel, dilation, stride, lh, lw):
        padded[:, ci, y, x_] += cols[:, row, window]
    return padded[:, :, ph:ph + h, pw:pw + w]


def diag_embed(v, offset, dim1, dim2):
    side = v.shape[-1] + abs(offset)
    out = np.zeros(v.shape[:-1] + (side, side), v.dtype)
    for k in range(v.shape[-1]):
        i, j = (k, k + offset) if offset >= 0 else (k - offset, k)
        out[..., i, j] = v[..., k]
    nd = out.ndim
    a, b = dim1 % nd, dim2 % nd
    # the diagonal's two dims are the last two; move them to a and b (a < b in insertion order)
    rest = [d for d in range(nd) if d not in (a, b)]
    order = [0] * nd
    for src, dst in zip(range(nd - 2), rest):
        order[dst] = src
    order[a], order[b] = nd - 2, nd - 1
    return np.transpose(out, order)


def pixel_shuffle(x, r):
    *batch, c, h, w = x.shape
    out = np.zeros((*batch, c // (r * r), h * r, w * r), x.dtype)
    for ci in range(c):
        oc, k = divmod(ci, r * r)
        i, j = divmod(k, r)
        out[..., oc, i::r, j::r] = x[..., ci, :, :]
    return out
