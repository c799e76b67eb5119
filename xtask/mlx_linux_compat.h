/* Force-included (-include) into every mlx-c translation unit and into bindgen on Linux.
 *
 * mlx-c is written against Apple clang. Two gaps remain with Debian's GCC 12:
 * - mlx-c formats a few error messages with std::format, which libstdc++ only has from GCC 13;
 *   a `{}`-substituting fallback is enough for those messages.
 * - mlx/c/half.h only declares float16_t / bfloat16_t on ARM, so the float16 accessors are not
 *   compiled on x86_64; declaring both as raw 16-bit storage restores them (mlx-rs only moves the
 *   bits).
 */
#ifndef CORRAL_MLX_LINUX_COMPAT_H
#define CORRAL_MLX_LINUX_COMPAT_H

#include <stdint.h>

#if defined(__cplusplus)
#include <version>
#if defined(__cpp_lib_format)
#include <format>
#else
#include <sstream>
#include <string>
namespace std {
inline void corral_format_into(std::ostringstream& out, const char* pattern) {
  out << pattern;
}
template <class Head, class... Tail>
void corral_format_into(
    std::ostringstream& out,
    const char* pattern,
    const Head& head,
    const Tail&... tail) {
  for (; *pattern != '\0'; ++pattern) {
    if (pattern[0] == '{' && pattern[1] == '}') {
      out << head;
      corral_format_into(out, pattern + 2, tail...);
      return;
    }
    out << *pattern;
  }
}
template <class... Args>
std::string format(const char* pattern, const Args&... args) {
  std::ostringstream out;
  corral_format_into(out, pattern, args...);
  return out.str();
}
} // namespace std
#endif
#endif

#if !defined(__aarch64__) && !defined(__ARM_FEATURE_FP16_SCALAR_ARITHMETIC)
typedef uint16_t float16_t;
typedef uint16_t bfloat16_t;
#define HAS_FLOAT16
#define HAS_BFLOAT16
#endif

#endif
