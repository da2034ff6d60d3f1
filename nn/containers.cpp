#include "nn/containers.h"

#include <algorithm>

namespace hg::nn {

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) : Module("ModuleList") {
  for (const auto& m : modules) push_back(m);
}

ModuleList& ModuleList::push_back(std::shared_ptr<Module> module) {
  add_child(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
  return *this;
}

const std::shared_ptr<Module>& ModuleList::operator[](size_t i) const {
  HG_CHECK(i < modules_.size(), "ModuleList", "index {} out of range for {} modules", i, modules_.size());
  return modules_[i];
}

ModuleDict::ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules)
    : Module("ModuleDict") {
  for (const auto& [name, m] : modules) insert(name, m);
}

ModuleDict& ModuleDict::insert(const std::string& name, std::shared_ptr<Module> module) {
  add_child(name, module);  // checks the name is new and valid, and the module non-null
  entries_.emplace_back(name, std::move(module));
  return *this;
}

bool ModuleDict::contains(const std::string& name) const {
  return std::any_of(entries_.begin(), entries_.end(), [&](const auto& e) { return e.first == name; });
}

const std::shared_ptr<Module>& ModuleDict::operator[](const std::string& name) const {
  for (const auto& e : entries_)
    if (e.first == name) return e.second;
  fail("ModuleDict", "no module named '{}' (keys: {})", name, fmt::join(keys(), ", "));
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& e : entries_) out.push_back(e.first);
  return out;
}

}  // namespace hg::nn
