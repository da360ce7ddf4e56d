package cpu

import (
	"math"
	"slices"

	"petal/engine/checkpoint"
	"petal/engine/safetensors"
)

// bf16 widens a bfloat16 bit pattern to float32 exactly.
func bf16(u uint16) float32 { return math.Float32frombits(uint32(u) << 16) }

// matrix is a checkpoint.Matrix with its data resolved to typed slices.
type matrix struct {
	rows, cols int
	bits       int // 0: dense
	group      int
	words      []uint32 // quantized codes, rows of cols*bits/32 words
	scales     []uint16 // bf16, rows of cols/group
	biases     []uint16
	denseF32   []float32 // dense F32 weights
	denseBF16  []uint16  // dense BF16 weights
}

func newMatrix(m *checkpoint.Matrix) *matrix {
	x := &matrix{rows: m.Rows, cols: m.Cols, bits: m.Bits, group: m.GroupSize}
	switch {
	case m.Bits != 0:
		x.words = m.Weight.Uint32s()
		x.scales = m.Scales.Uint16s()
		x.biases = m.Biases.Uint16s()
	case m.Weight.DType == safetensors.F32:
		x.denseF32 = m.Weight.Float32s()
	default:
		x.denseBF16 = m.Weight.Uint16s()
	}
	return x
}

// tiledRows is how many of a pass's t rows of one sequence take the
// tiles: all of them from tileMinTokens on, where the tiles pay, else
// none (see mulTiled).
func tiledRows(t int) int {
	if t >= tileMinTokens {
		return t
	}
	return 0
}

// mul computes, for each of the t input rows x[i*cols:(i+1)*cols], the
// product with expert e's matrix (e is 0 for a single matrix) into
// out[i*rows:(i+1)*rows], as a Forward of t tokens does (tiledRows).
func (m *matrix) mul(sc *scratch, e int, x []float32, t int, out []float32) {
	m.mulTiled(sc, e, x, t, tiledRows(t), out)
}

// mulTiled is mul whose first nt input rows take the tiles and the rest
// the row kernels.
func (m *matrix) mulTiled(sc *scratch, e int, x []float32, t, nt int, out []float32) {
	g := sc.products()
	g.add(m, e, x, t, nt, g.rows(out, t, m.rows))
	g.compute()
}

// mulRows is mulTiled writing input row i's products into outs[i].
func (m *matrix) mulRows(sc *scratch, e int, x []float32, t, nt int, outs [][]float32) {
	g := sc.products()
	g.add(m, e, x, t, nt, outs)
	g.compute()
}

// products is a group of products that run as one parallel loop over
// all their weight rows, so that the small ones (an expert's, the
// shared expert's, the three of attention) cost the workers one start
// between them. Each output is the same sum whatever rows run beside
// it: an input row of the first nt of its product by the tiles (every
// weight row, in blocks of four weight rows by three input rows), the
// others' by the row kernels (whose pairs give each row the single row's
// bits). So a sequence's logits in a batched step are those of its
// Forward alone, where it takes the same path for its rows (tiledRows of
// its piece).
type products struct {
	sc     *scratch
	ps     []product
	arena  []float32   // the products' prepared inputs
	rowsOf [][]float32 // the output rows of the products' outs
	total  int         // weight rows of all products
	maxT   int
}

// maxGroupFloats bounds the prepared inputs a group holds (4 MiB): past
// it the group runs what it has and goes on empty, so that a prefill's
// experts, whose inputs are large and whose products are not small, do
// not each keep theirs.
const maxGroupFloats = 1 << 20

// products returns sc's group of products, emptied.
func (sc *scratch) products() *products {
	g := &sc.group
	g.sc = sc
	g.rowsOf = g.rowsOf[:0]
	g.reset()
	return g
}

func (g *products) reset() {
	g.ps = g.ps[:0]
	g.arena = g.arena[:0]
	g.total, g.maxT = 0, 0
}

// rows returns out's t rows of n as the rows a product writes.
func (g *products) rows(out []float32, t, n int) [][]float32 {
	first := len(g.rowsOf)
	for i := range t {
		g.rowsOf = append(g.rowsOf, out[i*n:(i+1)*n])
	}
	return g.rowsOf[first:]
}

// alloc returns n zeroed floats of the arena. Growing it leaves the
// products before on the old array, which they keep.
func (g *products) alloc(n int) []float32 {
	used := len(g.arena)
	g.arena = slices.Grow(g.arena, n)[:used+n]
	d := g.arena[used : used+n : used+n]
	clear(d)
	return d
}

// add puts in the group the product of expert e's matrix m (e is 0 for a
// single matrix) with t input rows x[i*cols:(i+1)*cols] into outs[i], the
// first nt by the tiles.
func (g *products) add(m *matrix, e int, x []float32, t, nt int, outs [][]float32) {
	if t == 0 {
		return
	}
	p := product{m: m, e: e, x: x, t: t, outs: outs}
	if q := g.sameInputs(m, x, t, nt); q != nil {
		p.nt, p.stride, p.xsum, p.xext, p.xk = q.nt, q.stride, q.xsum, q.xext, q.xk
		p.wide, p.xw, p.xsw = q.wide, q.xw, q.xsw
	} else if m.bits != 0 {
		groups := m.cols / m.group
		tiled := vectorKernels && nt > 0
		lanes := m.bits == 4 && servesGroups(4, m.group/8)
		need := t * groups
		if tiled {
			p.nt = nt
			p.stride = tileStride(m.cols, groups)
			// Whole blocks of three input rows: the kernel of fewer adds
			// in another order on arm64, and a row's sums would depend on
			// its place among the others.
			need += (nt + 2) / 3 * 3 * p.stride
		}
		if lanes {
			need += (t - p.nt) * m.cols
			if wideKernels {
				p.wide = wideBlocks(t - p.nt)
				need += p.wide * 4 * (m.cols + groups)
			}
		}
		if len(g.ps) > 0 && len(g.arena)+need > maxGroupFloats {
			g.compute()
			g.reset()
		}
		// xsum[i*groups+j] is the sum of input row i over group j: the
		// bias term of a group is bias*xsum, so it costs one multiply.
		p.xsum = g.alloc(t * groups)
		for i := 0; i < t; i++ {
			xi := x[i*m.cols : (i+1)*m.cols]
			for j := 0; j < groups; j++ {
				var s float32
				for _, v := range xi[j*m.group : (j+1)*m.group] {
					s += v
				}
				p.xsum[i*groups+j] = s
			}
		}
		if tiled {
			p.xext = g.alloc((nt + 2) / 3 * 3 * p.stride)
			for i := 0; i < nt; i++ {
				row := p.xext[i*p.stride : (i+1)*p.stride]
				copy(row, x[i*m.cols:(i+1)*m.cols])
				copy(row[m.cols:], p.xsum[i*groups:(i+1)*groups])
			}
		}
		p.xk = x[p.nt*m.cols : t*m.cols]
		if lanes {
			// Only for the groups the kernels take: the Go loops read x.
			buf := g.alloc(len(p.xk))
			p.xk = qdot4Lanes(&buf, p.xk)
		}
		if p.wide > 0 {
			p.xw, p.xsw = g.alloc(p.wide*4*m.cols), g.alloc(p.wide*4*groups)
			n := t - p.nt
			for b := range p.wide {
				var in [4]int
				for i := range in {
					in[i] = min(4*b+i, n-1)
				}
				packWide(p.xw[4*b*m.cols:4*(b+1)*m.cols], p.xsw[4*b*groups:4*(b+1)*groups], p.xk, p.xsum[p.nt*groups:], in, m.cols, groups)
			}
		}
	}
	p.first = g.total
	g.ps = append(g.ps, p)
	g.total += m.rows
	g.maxT = max(g.maxT, t)
}

// compute runs the group's products over the cores and waits for them.
func (g *products) compute() {
	grain := minRowsPerWorker
	if g.maxT > 1 {
		grain = 1
	}
	g.sc.parallelFor(g.total, grain, g)
}

// run does the weight rows [lo, hi) of the group, counted across its
// products in turn.
func (g *products) run(pt *part, lo, hi int) {
	for i := range g.ps {
		p := &g.ps[i]
		if lo < p.first+p.m.rows && hi > p.first {
			p.run(pt, max(lo, p.first)-p.first, min(hi, p.first+p.m.rows)-p.first)
		}
	}
}

// sameInputs is the group's last product where it is a quantized one of
// m's shape with the same inputs x (the same memory) and tiled rows, whose
// prepared inputs (group sums, tiles' rows, row kernels' and wide
// kernel's layouts) m's product takes as they are: the products of one
// input (attention's q, k and v; an expert's gate and up) prepare it
// once, work on the caller alone that grows with the rows of a batch.
func (g *products) sameInputs(m *matrix, x []float32, t, nt int) *product {
	if len(g.ps) == 0 || m.bits == 0 {
		return nil
	}
	tiled := 0 // the rows add gives the tiles
	if vectorKernels {
		tiled = nt
	}
	q := &g.ps[len(g.ps)-1]
	if q.m.bits != m.bits || q.m.cols != m.cols || q.m.group != m.group || q.t != t || q.nt != tiled || len(q.x) != len(x) || &q.x[0] != &x[0] {
		return nil
	}
	return q
}

// tileStride is the length of a row of mulQuantTiles' tiles and inputs:
// the columns, then one per group (bias against the group's input sum),
// padded to the vector kernels' 8 floats.
func tileStride(cols, groups int) int { return (cols + groups + 7) &^ 7 }

// product is one product of a group.
type product struct {
	m       *matrix
	e       int
	x, xsum []float32
	t       int
	outs    [][]float32
	first   int // its first weight row's number in the group
	// nt input rows take the tiles: xext holds them for mulQuantTiles,
	// each followed by its group sums and padded to stride; nil where
	// none does.
	nt     int
	xext   []float32
	stride int
	// xk is x's rows from nt on as the row kernel takes them (qdotRowVec).
	xk []float32
	// The inputs from nt on, in wide blocks of four as packWide lays them
	// out (none where the wide kernel does not run here or serve the
	// shape): xw their columns, xsw their group sums.
	wide    int
	xw, xsw []float32
}

func (p *product) run(pt *part, lo, hi int) {
	m := p.m
	if m.bits == 0 {
		m.mulDense(pt, p.e, p.x, p.t, p.outs, lo, hi)
		return
	}
	if p.xext != nil {
		m.mulQuantTiles(pt, p.e, p.xext, p.stride, p.nt, p.outs, lo, hi)
	}
	if n := p.nt; n < p.t {
		groups := m.cols / m.group
		done := p.mulWide(pt, lo, hi)
		if k := n + done; k < p.t {
			m.mulQuant(p.e, p.x[k*m.cols:], p.xk[done*m.cols:], p.xsum[k*groups:], p.t-k, p.outs[k:], lo, hi)
		}
	}
}

// mulQuant does rows [lo, hi) of a quantized product by the row kernels,
// or the Go loop where they do not serve the shape: xk is x in the row
// kernel's order, x itself is what the Go loop takes.
func (m *matrix) mulQuant(e int, x, xk, xsum []float32, t int, outs [][]float32, lo, hi int) {
	groups := m.cols / m.group
	wordsPerRow := m.cols * m.bits / 32
	wordsPerGroup := m.group * m.bits / 32
	lo = m.mulQuantPairs(e, xk, xsum, t, outs, lo, hi)
	for r := lo; r < hi; r++ {
		row := e*m.rows + r
		words := m.words[row*wordsPerRow : (row+1)*wordsPerRow]
		sc := m.scales[row*groups : (row+1)*groups]
		bi := m.biases[row*groups : (row+1)*groups]
		for i := m.quads(words, sc, bi, xk, xsum, t, outs, r); i < t; i++ {
			xs := xsum[i*groups : (i+1)*groups]
			v, ok := qdotRowVec(m.bits, words, xk[i*m.cols:(i+1)*m.cols], sc, bi, xs, wordsPerGroup)
			if !ok {
				v = m.qdotRowGo(words, x[i*m.cols:(i+1)*m.cols], sc, bi, xs)
			}
			outs[i][r] = v
		}
	}
}

// wideMinInputs is the fewest inputs the wide kernel takes in a block:
// padded to four, two inputs cost it less than the pair kernels do.
const wideMinInputs = 2

// wideBlocks is how many blocks of four inputs the wide kernel takes of
// n, the last of two or three padded with its last input; a last one
// left alone takes the pair kernels.
func wideBlocks(n int) int {
	if n%4 >= wideMinInputs {
		return n/4 + 1
	}
	return n / 4
}

// packWide lays out inputs in of xk (rows of cols floats in qdot4Lanes'
// order) and of xsum (their group sums, rows of groups) as
// qdot4x4PairsKernel takes them, into x (4*cols floats) and xs
// (4*groups): for each 64 columns the inputs' 64 in turn; for each 8
// groups the inputs' 8 sums in turn, then each group left the inputs'.
func packWide(x, xs, xk, xsum []float32, in [4]int, cols, groups int) {
	for b := 0; b < cols/64; b++ {
		for i, k := range in {
			copy(x[(4*b+i)*64:(4*b+i+1)*64], xk[k*cols+b*64:][:64])
		}
	}
	full := groups &^ 7
	for b := 0; b < full; b += 8 {
		for i, k := range in {
			copy(xs[4*b+8*i:][:8], xsum[k*groups+b:][:8])
		}
	}
	for g := full; g < groups; g++ {
		for i, k := range in {
			xs[4*g+i] = xsum[k*groups+g]
		}
	}
}

// mulWide does rows [lo, hi) of the product for the inputs packed in its
// wide blocks by the wide kernel and returns how many inputs that was,
// counted from the first past the tiled ones.
func (p *product) mulWide(pt *part, lo, hi int) int {
	m := p.m
	if p.wide == 0 || hi <= lo {
		return 0
	}
	groups, wordsPerRow := m.cols/m.group, m.cols/8
	n, first := hi-lo, p.e*m.rows+lo
	words := m.words[first*wordsPerRow : (first+n)*wordsPerRow]
	sc, bi := m.scales[first*groups:(first+n)*groups], m.biases[first*groups:(first+n)*groups]
	buf := grow(&pt.wide, 4*(n+1))
	left := p.t - p.nt
	for b := range p.wide {
		x, xs := p.xw[4*b*m.cols:4*(b+1)*m.cols], p.xsw[4*b*groups:4*(b+1)*groups]
		if !qdotPairsWideVec(words, sc, bi, n, x, xs, m.group/8, buf) {
			return 4 * b
		}
		for i := range min(4, left-4*b) {
			out := p.outs[p.nt+4*b+i][lo:hi]
			for r := range out {
				out[r] = buf[4*r+i]
			}
		}
	}
	return min(4*p.wide, left)
}

// qdotRowGo is qdotRowVec's Go loop, one input row at a time whatever
// the number of rows, so that a row's sum is the same in any batch.
func (m *matrix) qdotRowGo(words []uint32, x []float32, sc, bi []uint16, xsum []float32) float32 {
	wordsPerGroup := m.group * m.bits / 32
	var acc float32
	for g := range sc {
		gw := words[g*wordsPerGroup : (g+1)*wordsPerGroup]
		xg := x[g*m.group : (g+1)*m.group]
		var dot float32
		if m.bits == 4 {
			dot = dot4(gw, xg)
		} else {
			dot = dot8(gw, xg)
		}
		acc += bf16(sc[g])*dot + bf16(bi[g])*xsum[g]
	}
	return acc
}

// mulQuantPairs does rows [lo, lo+2*half) of a product, half =
// (hi-lo)/2, by the two-row kernels, for each input row in xk (x in the
// row kernel's order). It pairs row lo+i with row lo+half+i: two rows
// next to each other made two streams in one page, which the hardware
// prefetcher followed worse than one (half the rate from memory, where
// rows far apart were faster than one row at a time). It returns the
// first row it left to the caller: hi-1 where the rows are odd, lo where
// the kernels do not serve the shape.
func (m *matrix) mulQuantPairs(e int, xk, xsum []float32, t int, outs [][]float32, lo, hi int) int {
	groups := m.cols / m.group
	wordsPerRow := m.cols * m.bits / 32
	wordsPerGroup := m.group * m.bits / 32
	half := (hi - lo) / 2
	var words [2][]uint32
	var sc, bi [2][]uint16
	var pair [2]float32
	for i := 0; i < half; i++ {
		r := [2]int{lo + i, lo + half + i}
		for k, rk := range r {
			row := e*m.rows + rk
			words[k] = m.words[row*wordsPerRow : (row+1)*wordsPerRow]
			sc[k] = m.scales[row*groups : (row+1)*groups]
			bi[k] = m.biases[row*groups : (row+1)*groups]
		}
		j := min(m.quads(words[0], sc[0], bi[0], xk, xsum, t, outs, r[0]), m.quads(words[1], sc[1], bi[1], xk, xsum, t, outs, r[1]))
		for ; j < t; j++ {
			if !qdotPairVec(m.bits, words, xk[j*m.cols:(j+1)*m.cols], sc, bi, xsum[j*groups:(j+1)*groups], wordsPerGroup, &pair) {
				return lo
			}
			outs[j][r[0]], outs[j][r[1]] = pair[0], pair[1]
		}
	}
	return lo + 2*half
}

// quads sets outs[j][r] to the product of row r (words, sc, bi) with
// input j of xk (its group sums in xsum), four inputs a call of the
// four-input kernel, and returns the first input it left (the last 1-3,
// or all where the kernel does not serve the shape): with fewer inputs
// the kernel's unused lanes cost more than the pair kernels (on one core,
// a 2048x2048 product of 2 inputs took 490 us padded to four, 348-376
// by the pairs; of 4, 520-540 against 682-690; of 8, 1094-1132 against
// 1339-1350).
func (m *matrix) quads(words []uint32, sc, bi []uint16, xk, xsum []float32, t int, outs [][]float32, r int) int {
	groups := m.cols / m.group
	var x, xs [4][]float32
	var out [4]float32
	j := 0
	for ; j+4 <= t; j += 4 {
		for i := range 4 {
			k := j + i
			x[i], xs[i] = xk[k*m.cols:(k+1)*m.cols], xsum[k*groups:(k+1)*groups]
		}
		if !qdotQuadVec(m.bits, words, x, sc, bi, xs, m.group*m.bits/32, &out) {
			return j
		}
		for i := range 4 {
			outs[j+i][r] = out[i]
		}
	}
	return j
}

// tileMinTokens is the fewest tokens of a piece for which the tiles pay:
// they dequantize each weight row once, which costs more than a product
// with one or two rows.
const tileMinTokens = 4

// tileBytes bounds a tile of mulQuantTiles, so that it stays in L2 while
// every input row passes over it.
const tileBytes = 128 << 10

// mulQuantTiles does rows [lo, hi) in tiles: it widens up to 64 weight
// rows into a tile of scale*code, each row followed by its group biases
// (xext's rows carry the matching group sums of x: folding the bias into
// each weight would round it against a bias near -8 scales, and prefill
// would drift from decode), and multiplies the tile by every input row
// in register blocks of four rows by three inputs. The tile stays in
// cache and each input row is read once per tile. The last block of a
// range short of four rows is padded with zero rows, so that every
// weight row's sums are the kernel's whatever the range.
func (m *matrix) mulQuantTiles(pt *part, e int, xext []float32, stride, t int, outs [][]float32, lo, hi int) {
	groups := m.cols / m.group
	rows := min(64, max(4, tileBytes/(4*stride))&^3)
	tile := take(&pt.tile, rows*stride)
	var blk [12]float32
	for ; lo < hi; lo += rows {
		n := min(rows, hi-lo)
		for k := range n {
			r := e*m.rows + lo + k
			row := tile[k*stride : (k+1)*stride]
			m.scaledCodes(r, row[:m.cols])
			bf16s(m.biases[r*groups:(r+1)*groups], row[m.cols:])
		}
		clear(tile[n*stride : (n+3)&^3*stride])
		for i := 0; i < t; i += 3 {
			for k := 0; k < n; k += 4 {
				dot4x3Vec(tile[k*stride:], stride, xext[i*stride:], stride, stride, &blk)
				w := min(4, n-k)
				for j := range min(3, t-i) {
					copy(outs[i+j][lo+k:lo+k+w], blk[4*j:4*j+w])
				}
			}
		}
	}
}

// scaledCodes writes quantized row r (rows of all experts counted in turn)
// into dst as scale*code, without the bias.
func (m *matrix) scaledCodes(r int, dst []float32) {
	groups := m.cols / m.group
	perWord := 32 / m.bits
	mask := uint32(1)<<m.bits - 1
	words := m.words[r*m.cols/perWord : (r+1)*m.cols/perWord]
	if scaledCodesVec(m.bits, words, m.scales[r*groups:(r+1)*groups], dst, m.group/perWord) {
		return
	}
	for g := 0; g < groups; g++ {
		s := bf16(m.scales[r*groups+g])
		d := dst[g*m.group : (g+1)*m.group]
		for j, w := range words[g*m.group/perWord : (g+1)*m.group/perWord] {
			for k := 0; k < perWord; k++ {
				d[j*perWord+k] = s * float32(w>>uint(k*m.bits)&mask)
			}
		}
	}
}

// bf16s widens bf16 bit patterns into dst.
func bf16s(src []uint16, dst []float32) []float32 {
	for i, u := range src {
		dst[i] = bf16(u)
	}
	return dst[:len(src)]
}

// dot4 is the dot product of 8 nibbles per word (lowest first) with x.
func dot4(words []uint32, x []float32) float32 {
	var s0, s1 float32
	for j, w := range words {
		xs := x[j*8 : j*8+8 : j*8+8]
		s0 += float32(w&15)*xs[0] + float32(w>>4&15)*xs[1] + float32(w>>8&15)*xs[2] + float32(w>>12&15)*xs[3]
		s1 += float32(w>>16&15)*xs[4] + float32(w>>20&15)*xs[5] + float32(w>>24&15)*xs[6] + float32(w>>28)*xs[7]
	}
	return s0 + s1
}

// dot8 is the dot product of 4 bytes per word (lowest first) with x.
func dot8(words []uint32, x []float32) float32 {
	var s float32
	for j, w := range words {
		xs := x[j*4 : j*4+4 : j*4+4]
		s += float32(w&255)*xs[0] + float32(w>>8&255)*xs[1] + float32(w>>16&255)*xs[2] + float32(w>>24)*xs[3]
	}
	return s
}

func (m *matrix) mulDense(pt *part, e int, x []float32, t int, outs [][]float32, lo, hi int) {
	row := take(&pt.row, m.cols)
	for r := lo; r < hi; r++ {
		base := (e*m.rows + r) * m.cols
		if m.denseF32 != nil {
			copy(row, m.denseF32[base:base+m.cols])
		} else {
			for c, u := range m.denseBF16[base : base+m.cols] {
				row[c] = bf16(u)
			}
		}
		for i := 0; i < t; i++ {
			outs[i][r] = dot(row, x[i*m.cols:(i+1)*m.cols])
		}
	}
}

// row dequantizes row r (of expert 0) into dst: the embedding gather.
func (m *matrix) row(r int, dst []float32) {
	if m.bits != 0 {
		m.dequantRow(r, dst)
		return
	}
	base := r * m.cols
	if m.denseF32 != nil {
		copy(dst, m.denseF32[base:base+m.cols])
		return
	}
	bf16s(m.denseBF16[base:base+m.cols], dst)
}

// dequantRow writes row r of the quantized weights (rows of all experts
// counted in turn) into dst as scale*code + bias.
func (m *matrix) dequantRow(r int, dst []float32) {
	groups := m.cols / m.group
	perWord := 32 / m.bits
	mask := uint32(1)<<m.bits - 1
	words := m.words[r*m.cols/perWord : (r+1)*m.cols/perWord]
	for g := 0; g < groups; g++ {
		s, b := bf16(m.scales[r*groups+g]), bf16(m.biases[r*groups+g])
		gw := words[g*m.group/perWord : (g+1)*m.group/perWord]
		d := dst[g*m.group : (g+1)*m.group]
		for j, w := range gw {
			for k := 0; k < perWord; k++ {
				d[j*perWord+k] = s*float32(w>>uint(k*m.bits)&mask) + b
			}
		}
	}
}

func dot(a, b []float32) float32 {
	v, i := dotVec(a, b)
	return v + dotGo(a[i:], b[i:len(a)])
}

// axpyRows adds w[p] * v[p*stride:][:len(out)] over p < len(w) to out,
// 64 columns at a time by the vector kernel.
func axpyRows(v []float32, stride int, w, out []float32) {
	c := 0
	for ; c+64 <= len(out); c += 64 {
		if !axpy64Vec(v[c:], stride, w, out[c:c+64]) {
			break
		}
	}
	for p, wp := range w {
		vp := v[p*stride+c : p*stride+len(out)]
		for j := range vp {
			out[c+j] += wp * vp[j]
		}
	}
}

// axpyRows3 is axpyRows for three weight rows w[j*wStride:][:n] and
// outputs out[j*outStride:][:width] at once: each row of v is read once
// for all three, 32 columns at a time by the vector kernel.
func axpyRows3(v []float32, stride int, w []float32, wStride, n int, out []float32, outStride, width int) {
	c := 0
	for ; c+32 <= width; c += 32 {
		if !axpy32x3Vec(v[c:], stride, w, wStride, n, out[c:], outStride) {
			break
		}
	}
	for j := range 3 {
		if c < width {
			axpyRows(v[c:], stride, w[j*wStride:][:n], out[j*outStride+c:j*outStride+width])
		}
	}
}

// expShift sets s[i] = exp(s[i]-shift) and returns their sum.
func expShift(s []float32, shift float32) float32 {
	sum, i := expShiftVec(s, shift)
	for ; i < len(s); i++ {
		e := float32(math.Exp(float64(s[i] - shift)))
		s[i] = e
		sum += e
	}
	return sum
}

// dotGo is dot's Go loop: the reference of the vector kernel and the tail
// it leaves.
func dotGo(a, b []float32) float32 {
	var s0, s1, s2, s3 float32
	n := len(a)
	b = b[:n]
	i := 0
	for ; i+4 <= n; i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < n; i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// vector converts a small checkpoint vector to float32.
func vector(v *checkpoint.Vector) []float32 {
	t := v.T
	if t.DType == safetensors.F32 {
		return append([]float32(nil), t.Float32s()...)
	}
	raw := t.Uint16s()
	out := make([]float32, len(raw))
	for i, u := range raw {
		out[i] = bf16(u)
	}
	return out
}
