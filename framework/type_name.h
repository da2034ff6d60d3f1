// Readable C++ type names for messages: "main()::TwoGrads" instead of typeid's "Z4mainE8TwoGrads".
#pragma once

#include <exception>
#include <string>
#include <typeinfo>

namespace hg {

// The demangled form of a typeid name (the name itself where it cannot be demangled).
std::string demangle(const char* mangled);

template <class T>
std::string type_name() {
  return demangle(typeid(T).name());
}

// The dynamic type of an exception, e.g. "std::out_of_range".
inline std::string type_name(const std::exception& e) { return demangle(typeid(e).name()); }

}  // namespace hg
