#include "coordinator/frontend_sessions.h"

#include <cstring>

#include "ipc/object_id.h"

namespace shoal::coordinator {
namespace {

// A random non-zero session id (from the kernel's CSPRNG, as object ids):
// a client resumes a session by naming it, so it must not be guessable.
uint64_t RandomSessionId() {
  for (;;) {
    const ObjectId r = ObjectId::Random();
    uint64_t id = 0;
    std::memcpy(&id, r.Binary().data(), sizeof id);
    if (id != 0) return id;
  }
}

}  // namespace

Principal& SessionTable::PrincipalOf(const std::string& key, bool owner) {
  std::unique_ptr<Principal>& p = principals_[key];
  if (!p) {
    p = std::make_unique<Principal>();
    p->key = key;
    p->owner = owner;
  }
  return *p;
}

Session& SessionTable::LegacySession(Principal& p, const Route& route,
                                     bool* fresh) {
  auto [it, made] = legacy_.try_emplace({p.key, RouteKey(route)}, 0);
  *fresh = made;
  if (!made) return *sessions_.at(it->second);
  auto s = std::make_unique<Session>();
  s->serial = next_serial_++;
  s->principal = &p;
  s->route = route;
  it->second = s->serial;
  p.sessions.insert(s->serial);
  if (route.fd >= 0) by_fd_[{route.tcp, route.fd}].insert(s->serial);
  Session& ref = *s;
  sessions_.emplace(s->serial, std::move(s));
  return ref;
}

Session& SessionTable::NewResumable(Principal& p, const Route& route) {
  auto s = std::make_unique<Session>();
  s->serial = next_serial_++;
  s->principal = &p;
  s->route = route;
  do {
    s->id = RandomSessionId();
  } while (resumable_.count({p.key, s->id}) != 0);
  resumable_[{p.key, s->id}] = s->serial;
  p.sessions.insert(s->serial);
  if (route.fd >= 0) by_fd_[{route.tcp, route.fd}].insert(s->serial);
  Session& ref = *s;
  sessions_.emplace(s->serial, std::move(s));
  return ref;
}

Session* SessionTable::Resumable(const Principal& p, uint64_t id) {
  auto it = resumable_.find({p.key, id});
  return it == resumable_.end() ? nullptr : BySerial(it->second);
}

Session* SessionTable::BySerial(uint64_t serial) {
  auto it = sessions_.find(serial);
  return it == sessions_.end() ? nullptr : it->second.get();
}

std::vector<Session*> SessionTable::OnConnection(bool tcp, int fd) {
  std::vector<Session*> out;
  auto it = by_fd_.find({tcp, fd});
  if (it == by_fd_.end()) return out;
  for (uint64_t serial : it->second) {
    if (Session* s = BySerial(serial)) out.push_back(s);
  }
  return out;
}

void SessionTable::Reroute(Session& s, const Route& route) {
  Unroute(s);
  s.route = route;
  if (route.fd >= 0) by_fd_[{route.tcp, route.fd}].insert(s.serial);
}

void SessionTable::Unroute(Session& s) {
  if (s.route.fd < 0) return;
  auto it = by_fd_.find({s.route.tcp, s.route.fd});
  if (it == by_fd_.end()) return;
  it->second.erase(s.serial);
  if (it->second.empty()) by_fd_.erase(it);
}

uint32_t SessionTable::Remove(Session& s) {
  Unroute(s);
  Principal* p = s.principal;
  if (s.resumable()) {
    resumable_.erase({p->key, s.id});
  } else {
    legacy_.erase({p->key, RouteKey(s.route)});
  }
  p->sessions.erase(s.serial);
  sessions_.erase(s.serial);  // `s` is gone
  if (p->sessions.empty() && p->tasks == 0 && p->held_bytes == 0 &&
      p->waits == 0 && p->parked == 0) {
    const uint32_t account = p->account;
    principals_.erase(p->key);
    return account;
  }
  return 0;
}

}  // namespace shoal::coordinator
