// Runs kernels/common.cuh's conversions on the host (compiled with kernels/emu/cuda_host.h,
// the emulated device's CUDA shim): reads f32 bit patterns from
// argv[1], writes for each: the four FP8 encodings (E4M3 sat / nosat, E5M2 sat / nosat), then
// bf16 and f16 of it, then the four scaled quantizes `fp8_quantize(x, 0.37)` in the same order; then the decode of all 256 codes of both formats and the f32 of all 65536
// bf16 and f16 patterns, to argv[2]. Little-endian raw bytes throughout.
#include "common.cuh"
#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  FILE* in = std::fopen(argv[1], "rb");
  FILE* out = std::fopen(argv[2], "wb");
  if (!in || !out) return 3;
  std::vector<unsigned> xs;
  unsigned v;
  while (std::fread(&v, 4, 1, in) == 1) xs.push_back(v);
  for (unsigned bits : xs) {
    const float x = __uint_as_float(bits);
    unsigned char c[4] = {(unsigned char)fp8_encode<FMT_E4M3, true>(x), (unsigned char)fp8_encode<FMT_E4M3, false>(x),
                          (unsigned char)fp8_encode<FMT_E5M2, true>(x), (unsigned char)fp8_encode<FMT_E5M2, false>(x)};
    std::fwrite(c, 1, 4, out);
    const u16 h[2] = {f32_to_bf16(x), f32_to_f16(x)};
    std::fwrite(h, 2, 2, out);
    const float s = 0.37f;
    unsigned char q[4] = {(unsigned char)fp8_quantize<FMT_E4M3, true>(x, s), (unsigned char)fp8_quantize<FMT_E4M3, false>(x, s),
                          (unsigned char)fp8_quantize<FMT_E5M2, true>(x, s), (unsigned char)fp8_quantize<FMT_E5M2, false>(x, s)};
    std::fwrite(q, 1, 4, out);
  }
  for (unsigned code = 0; code < 256; ++code) {
    const unsigned d[2] = {__float_as_uint(fp8_decode<FMT_E4M3>(code)), __float_as_uint(fp8_decode<FMT_E5M2>(code))};
    std::fwrite(d, 4, 2, out);
  }
  for (unsigned h = 0; h < 65536; ++h) {
    const unsigned d[2] = {__float_as_uint(bf16_to_f32(h)), __float_as_uint(f16_to_f32(h))};
    std::fwrite(d, 4, 2, out);
  }
  return std::fclose(out) == 0 ? 0 : 4;
}
