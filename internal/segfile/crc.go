package segfile

import "hash/crc32"

// The forward search of --skip-damaged tries every magic byte as a batch
// start, and a candidate's CRC covers the whole length it declares: CRCing
// each candidate afresh costs the file's size times the candidates, which
// a file of plausible headers (crafted, or an unlucky one) makes
// quadratic. The CRC is linear, so rangeCRC derives a span's CRC from two
// prefix CRCs of the window instead, checkpointed every ckStep bytes: each
// byte is CRCed once per window load, and each candidate costs at most
// 2*ckStep bytes plus a few dozen GF(2) multiplications. The arithmetic
// is zlib's crc32_combine.

// ckStep is the spacing of the prefix CRC checkpoints.
const ckStep = 4 << 10

// castagnoliPoly is CRC-32C's polynomial, reflected.
const castagnoliPoly = 0x82f63b78

// x2nTable[k] is x^(2^k) modulo the polynomial.
var x2nTable = func() (t [32]uint32) {
	p := uint32(1) << 30 // x^1
	t[0] = p
	for n := 1; n < len(t); n++ {
		p = multModP(p, p)
		t[n] = p
	}
	return t
}()

// multModP returns a*b modulo the polynomial (reflected bit order).
func multModP(a, b uint32) uint32 {
	m := uint32(1) << 31
	var p uint32
	for {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				return p
			}
		}
		m >>= 1
		if b&1 != 0 {
			b = b>>1 ^ castagnoliPoly
		} else {
			b >>= 1
		}
	}
}

// x8nModP returns x^(8n) modulo the polynomial: appending n bytes.
func x8nModP(n int64) uint32 {
	p := uint32(1) << 31 // x^0
	for k := 3; n > 0; n, k = n>>1, k+1 {
		if n&1 != 0 {
			p = multModP(x2nTable[k&31], p)
		}
	}
	return p
}

// prefixCRCs are the CRCs of a window's first i*ckStep bytes, computed as
// far as asked and dropped when the window moves.
type prefixCRCs struct {
	start int64 // the window start they were computed for
	ck    []uint32
	// shiftN and shift are the last span length asked and x8nModP of it:
	// damaged bytes tend to repeat the length they declare.
	shiftN int64
	shift  uint32
}

// rangeCRC returns the CRC-32C of the window's bytes [a, b), file
// positions that the window holds: with A the bytes before a and B those
// of [a, b), crc(A+B) = crc(A)*x^(8|B|) + crc(B).
func (w *window) rangeCRC(a, b int64) uint32 {
	if w.pc.start != w.start || len(w.pc.ck) == 0 {
		w.pc.start, w.pc.ck = w.start, append(w.pc.ck[:0], 0)
	}
	pa, pb := w.prefixCRC(a-w.start), w.prefixCRC(b-w.start)
	if n := b - a; n != w.pc.shiftN || w.pc.shift == 0 {
		w.pc.shiftN, w.pc.shift = n, x8nModP(n)
	}
	return pb ^ multModP(w.pc.shift, pa)
}

// prefixCRC returns the CRC of w.buf[:x].
func (w *window) prefixCRC(x int64) uint32 {
	i := int(x / ckStep)
	for j := len(w.pc.ck) - 1; j < i; j++ {
		w.pc.ck = append(w.pc.ck, crc32.Update(w.pc.ck[j], castagnoli, w.buf[j*ckStep:(j+1)*ckStep]))
	}
	return crc32.Update(w.pc.ck[i], castagnoli, w.buf[i*ckStep:x])
}
