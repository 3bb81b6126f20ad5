#include "pyvalues/small_call_pickle.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace shoal::python {
namespace {

// Writes the pickle opcodes of small plain values (PickleSmallCall). No
// memo: values are written where they occur, so a container met twice (or
// inside itself) is refused rather than duplicated.
class SmallCallPickler {
 public:
  static constexpr size_t kMaxBytes = 8 << 10;
  static constexpr int kMaxDepth = 16;

  bool Put(PyObject* o, int depth) {
    if (out_.size() > kMaxBytes) return false;
    if (o == Py_None) return Op('N');
    if (o == Py_True) return Op('\x88');   // NEWTRUE
    if (o == Py_False) return Op('\x89');  // NEWFALSE
    PyTypeObject* t = Py_TYPE(o);
    if (t == &PyLong_Type) return PutInt(o);
    if (t == &PyFloat_Type) {
      Op('G');  // BINFLOAT: big-endian IEEE 754
      const double d = PyFloat_AS_DOUBLE(o);
      uint64_t bits;
      std::memcpy(&bits, &d, sizeof(bits));
      for (int i = 7; i >= 0; --i)
        out_.push_back(static_cast<char>(bits >> (8 * i)));
      return true;
    }
    if (t == &PyUnicode_Type) {
      Py_ssize_t n = 0;
      const char* c = PyUnicode_AsUTF8AndSize(o, &n);
      if (c == nullptr) {  // lone surrogates: pickle's own encoding
        PyErr_Clear();
        return false;
      }
      return PutSized(c, n, '\x8c', 'X');  // SHORT_BINUNICODE, BINUNICODE
    }
    if (t == &PyBytes_Type) {
      return PutSized(PyBytes_AS_STRING(o), PyBytes_GET_SIZE(o), 'C',
                      'B');  // SHORT_BINBYTES, BINBYTES
    }
    if (depth >= kMaxDepth) return false;
    if (t == &PyTuple_Type) {
      const Py_ssize_t n = PyTuple_GET_SIZE(o);
      if (n == 0) return Op(')');  // EMPTY_TUPLE
      if (n > 3) Op('(');          // MARK
      for (Py_ssize_t i = 0; i < n; ++i) {
        if (!Put(PyTuple_GET_ITEM(o, i), depth + 1)) return false;
      }
      return Op(n > 3 ? 't' : static_cast<char>(0x84 + n));  // TUPLE, TUPLEn
    }
    if (t == &PyList_Type) {
      if (!FirstSight(o)) return false;
      Op(']');  // EMPTY_LIST
      const Py_ssize_t n = PyList_GET_SIZE(o);
      if (n == 0) return true;
      Op('(');
      for (Py_ssize_t i = 0; i < n; ++i) {
        if (!Put(PyList_GET_ITEM(o, i), depth + 1)) return false;
      }
      return Op('e');  // APPENDS
    }
    if (t == &PyDict_Type) {
      if (!FirstSight(o)) return false;
      Op('}');  // EMPTY_DICT
      if (PyDict_GET_SIZE(o) == 0) return true;
      Op('(');
      Py_ssize_t pos = 0;
      PyObject *k, *v;
      while (PyDict_Next(o, &pos, &k, &v)) {
        if (!Put(k, depth + 1) || !Put(v, depth + 1)) return false;
      }
      return Op('u');  // SETITEMS
    }
    return false;
  }

  bool Op(char c) {
    out_.push_back(c);
    return true;
  }
  std::string& out() { return out_; }

 private:
  bool PutInt(PyObject* o) {
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0) return false;
    if (v >= 0 && v < 0x100) {
      Op('K');  // BININT1
      return Le(static_cast<uint64_t>(v), 1);
    }
    if (v >= 0 && v < 0x10000) {
      Op('M');  // BININT2
      return Le(static_cast<uint64_t>(v), 2);
    }
    if (v >= INT32_MIN && v <= INT32_MAX) {
      Op('J');  // BININT: signed, 4 bytes
      return Le(static_cast<uint64_t>(static_cast<uint32_t>(v)), 4);
    }
    Op('\x8a');  // LONG1: n bytes of two's complement, little-endian
    out_.push_back(8);
    return Le(static_cast<uint64_t>(v), 8);
  }

  bool PutSized(const char* data, Py_ssize_t n, char short_op, char long_op) {
    if (static_cast<size_t>(n) > kMaxBytes) return false;
    if (n < 0x100) {
      Op(short_op);
      Le(static_cast<uint64_t>(n), 1);
    } else {
      Op(long_op);
      Le(static_cast<uint64_t>(n), 4);
    }
    out_.append(data, static_cast<size_t>(n));
    return true;
  }

  bool Le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i)
      out_.push_back(static_cast<char>(v >> (8 * i)));
    return true;
  }

  bool FirstSight(PyObject* container) {
    if (std::find(seen_.begin(), seen_.end(), container) != seen_.end())
      return false;
    seen_.push_back(container);
    return true;
  }

  std::string out_;
  std::vector<PyObject*> seen_;  // dicts and lists written so far
};

// Reads PickleSmallCall's opcodes: a stack of owned references and the
// stack heights at each MARK.
class SmallCallUnpickler {
 public:
  explicit SmallCallUnpickler(absl::string_view in) : in_(in) {}
  ~SmallCallUnpickler() {
    for (PyObject* o : stack_) Py_DECREF(o);
  }

  PyObject* Run() {
    if (!Take(2) || in_[0] != '\x80' || static_cast<uint8_t>(in_[1]) > 5)
      return nullptr;  // PROTO
    at_ = 2;
    while (at_ < in_.size()) {
      const char op = in_[at_++];
      if (op == '.') {  // STOP: one value, nothing after it
        if (at_ != in_.size() || stack_.size() != 1 || !marks_.empty())
          return nullptr;
        PyObject* out = stack_.back();
        stack_.pop_back();
        return out;
      }
      if (!Step(op)) {
        if (PyErr_Occurred()) PyErr_Clear();  // pickle.loads says why
        return nullptr;
      }
    }
    return nullptr;  // no STOP
  }

 private:
  bool Step(char op) {
    switch (op) {
      case 'N':
        return PushBorrowed(Py_None);
      case '\x88':
        return PushBorrowed(Py_True);
      case '\x89':
        return PushBorrowed(Py_False);
      case 'K':
        return PushInt(1, false);  // BININT1
      case 'M':
        return PushInt(2, false);  // BININT2
      case 'J':
        return PushInt(4, true);  // BININT
      case '\x8a': {              // LONG1
        uint64_t n = 0;
        return Le(1, &n) && n <= 8 && n > 0 && PushInt(n, true);
      }
      case 'G': {  // BINFLOAT, big-endian
        if (!Take(8)) return false;
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i)
          bits = (bits << 8) | static_cast<uint8_t>(in_[at_ + i]);
        at_ += 8;
        double d;
        std::memcpy(&d, &bits, sizeof(d));
        return Push(PyFloat_FromDouble(d));
      }
      case '\x8c':
        return PushSized(1, /*text=*/true);  // SHORT_BINUNICODE
      case 'X':
        return PushSized(4, /*text=*/true);  // BINUNICODE
      case 'C':
        return PushSized(1, /*text=*/false);  // SHORT_BINBYTES
      case 'B':
        return PushSized(4, /*text=*/false);  // BINBYTES
      case ')':
        return Push(PyTuple_New(0));  // EMPTY_TUPLE
      case ']':
        return Push(PyList_New(0));  // EMPTY_LIST
      case '}':
        return Push(PyDict_New());  // EMPTY_DICT
      case '(':
        marks_.push_back(stack_.size());
        return true;  // MARK
      case '\x85':
      case '\x86':
      case '\x87':  // TUPLE1..3
        return MakeTuple(static_cast<size_t>(op - '\x84'));
      case 't': {  // TUPLE: from the mark
        if (marks_.empty()) return false;
        const size_t from = marks_.back();
        marks_.pop_back();
        return MakeTuple(stack_.size() - from);
      }
      case 'e':
        return Fill(/*dict=*/false);  // APPENDS
      case 'u':
        return Fill(/*dict=*/true);  // SETITEMS
      default:
        return false;
    }
  }

  bool Take(size_t n) const { return in_.size() - at_ >= n; }

  bool Le(size_t n, uint64_t* v) {
    if (!Take(n)) return false;
    *v = 0;
    for (size_t i = 0; i < n; ++i)
      *v |= static_cast<uint64_t>(static_cast<uint8_t>(in_[at_ + i]))
            << (8 * i);
    at_ += n;
    return true;
  }

  bool Push(PyObject* o) {
    if (o == nullptr) return false;
    stack_.push_back(o);
    return true;
  }
  bool PushBorrowed(PyObject* o) {
    Py_INCREF(o);
    return Push(o);
  }

  // An n-byte little-endian integer, two's complement when `is_signed`.
  bool PushInt(uint64_t n, bool is_signed) {
    uint64_t v = 0;
    if (!Le(n, &v)) return false;
    if (is_signed && n < 8 && (v >> (8 * n - 1)) != 0)
      v |= ~uint64_t{0} << (8 * n);  // sign-extend
    return Push(is_signed ? PyLong_FromLongLong(static_cast<int64_t>(v))
                          : PyLong_FromUnsignedLongLong(v));
  }

  bool PushSized(size_t len_bytes, bool text) {
    uint64_t n = 0;
    if (!Le(len_bytes, &n) || !Take(n)) return false;
    const char* p = in_.data() + at_;
    at_ += n;
    const Py_ssize_t len = static_cast<Py_ssize_t>(n);
    return Push(text ? PyUnicode_DecodeUTF8(p, len, "surrogatepass")
                     : PyBytes_FromStringAndSize(p, len));
  }

  bool MakeTuple(size_t n) {
    if (stack_.size() < n ||
        (!marks_.empty() && stack_.size() - n < marks_.back()))
      return false;
    PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(n));
    if (t == nullptr) return false;
    const size_t from = stack_.size() - n;
    for (size_t i = 0; i < n; ++i)
      PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), stack_[from + i]);
    stack_.resize(from);
    return Push(t);
  }

  // APPENDS / SETITEMS: the items above the last mark go into the list or
  // dict just below it.
  bool Fill(bool dict) {
    if (marks_.empty()) return false;
    const size_t from = marks_.back();
    marks_.pop_back();
    if (from == 0) return false;
    PyObject* target = stack_[from - 1];
    const size_t n = stack_.size() - from;
    bool ok = dict ? PyDict_CheckExact(target) && n % 2 == 0
                   : PyList_CheckExact(target);
    for (size_t i = 0; ok && i < n; i += dict ? 2 : 1) {
      ok = dict ? PyDict_SetItem(target, stack_[from + i],
                                 stack_[from + i + 1]) == 0
                : PyList_Append(target, stack_[from + i]) == 0;
    }
    for (size_t i = from; i < stack_.size(); ++i) Py_DECREF(stack_[i]);
    stack_.resize(from);
    return ok;
  }

  absl::string_view in_;
  size_t at_ = 0;
  std::vector<PyObject*> stack_;
  std::vector<size_t> marks_;
};

}  // namespace

std::optional<std::string> PickleSmallCall(PyObject* fn_bytes, PyObject* args) {
  if (!PyTuple_CheckExact(args)) return std::nullopt;
  if (fn_bytes != Py_None && !PyBytes_CheckExact(fn_bytes)) return std::nullopt;
  SmallCallPickler p;
  p.out().assign("\x80\x05", 2);  // PROTO 5
  if (!p.Put(fn_bytes, 0) || !p.Put(args, 0)) return std::nullopt;
  p.Op('}');     // the kwargs: an empty dict
  p.Op('\x87');  // TUPLE3
  p.Op('.');     // STOP
  if (p.out().size() > SmallCallPickler::kMaxBytes) return std::nullopt;
  return std::move(p.out());
}

PyObject* UnpickleSmallCall(absl::string_view pickle) {
  return SmallCallUnpickler(pickle).Run();
}

}  // namespace shoal::python
