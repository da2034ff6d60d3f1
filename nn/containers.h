// ModuleList and ModuleDict: containers that register their modules as children, so their
// parameters and state_dict keys appear under the container's name ("blocks.0.weight").
#pragma once

#include <string>
#include <vector>

#include "nn/module.h"

namespace hg::nn {

// Modules named "0", "1", ... in order. Holds them; has no forward of its own (index it).
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules);
  ModuleList& push_back(std::shared_ptr<Module> module);
  ModuleList& append(std::shared_ptr<Module> module) { return push_back(std::move(module)); }
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  // Throws "[ModuleList] index i out of range" past the end.
  const std::shared_ptr<Module>& operator[](size_t i) const;
  // The module at i as its own type (nullptr if it is not an M).
  template <class M>
  std::shared_ptr<M> get(size_t i) const {
    return std::dynamic_pointer_cast<M>((*this)[i]);
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

// Modules by name, iterated (keys(), begin/end) in insertion order.
class ModuleDict : public Module {
 public:
  ModuleDict() : Module("ModuleDict") {}
  ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules);
  // Adds a module; a name already in use (or containing '.') is an error.
  ModuleDict& insert(const std::string& name, std::shared_ptr<Module> module);
  size_t size() const { return entries_.size(); }
  bool contains(const std::string& name) const;
  // Throws "[ModuleDict] no module named ..." (listing the keys) for an unknown name.
  const std::shared_ptr<Module>& operator[](const std::string& name) const;
  template <class M>
  std::shared_ptr<M> get(const std::string& name) const {
    return std::dynamic_pointer_cast<M>((*this)[name]);
  }
  std::vector<std::string> keys() const;
  auto begin() const { return entries_.begin(); }
  auto end() const { return entries_.end(); }

 private:
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> entries_;
};

}  // namespace hg::nn
