// Overloaded: a visitor for std::visit built from lambdas, one per
// alternative, so that a dispatch over a std::variant reads as a table:
//
//   std::visit(Overloaded{[](const A& a) { ... }, [](const B& b) { ... }}, v);
//
// The standard library has none until C++26's variant::visit members; every
// service's message dispatch needs one, so it lives here once.
#ifndef SHOAL_BASE_OVERLOADED_H_
#define SHOAL_BASE_OVERLOADED_H_

namespace shoal {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace shoal

#endif  // SHOAL_BASE_OVERLOADED_H_
