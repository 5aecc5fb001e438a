// oidc_provider: a TEST-ONLY OpenID Connect provider for ember's OIDC tests
// (tests/integration/test_oidc.py). It is a real provider: the OP package of
// github.com/zitadel/oidc serves discovery, /authorize, /oauth/token (code
// flow with PKCE), /keys and /userinfo, and signs ID tokens with the current
// key. What is made for tests is only the storage (one client, one user,
// everything in memory) and the login step, which approves at once, so the
// flow needs no person.
//
// It listens on 127.0.0.1 (port -port, 0: any) and prints one line
// "ISSUER http://127.0.0.1:PORT" on stdout when it is ready. Test endpoints:
//
//	POST /test/rotate?alg=RS256|ES256|EdDSA  a new signing key (new kid) signs
//	                                          from now on; the old ones stay in
//	                                          /keys unless drop=1
//	POST /test/user?email=&given=&family=    the user the next logins are
//	POST /test/deny                           the next login answers
//	                                          error=access_denied
//	GET  /test/stats                          {"keys":N,"discovery":N,"token":N,
//	                                          "token_basic":N,"token_post":N}
//
// With -post-only the discovery document lists client_secret_post as the
// only way to authenticate at the token endpoint.
package main

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

func randID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// --- keys ---------------------------------------------------------------

type key struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv crypto.Signer
}

func newKey(alg string) (*key, error) {
	k := &key{kid: randID()[:12], alg: jose.SignatureAlgorithm(alg)}
	var err error
	switch alg {
	case "RS256":
		k.priv, err = rsa.GenerateKey(rand.Reader, 2048)
	case "ES256":
		k.priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "EdDSA":
		_, k.priv, err = ed25519.GenerateKey(rand.Reader)
	default:
		err = fmt.Errorf("alg %q: expected RS256, ES256 or EdDSA", alg)
	}
	return k, err
}

type signingKey struct{ k *key }

func (s signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return s.k.alg }
func (s signingKey) Key() any                                    { return s.k.priv }
func (s signingKey) ID() string                                  { return s.k.kid }

type publicKey struct{ k *key }

func (p publicKey) ID() string                         { return p.k.kid }
func (p publicKey) Algorithm() jose.SignatureAlgorithm { return p.k.alg }
func (p publicKey) Use() string                        { return "sig" }
func (p publicKey) Key() any                           { return p.k.priv.Public() }

// --- the one user and the one client -------------------------------------

type user struct {
	id, email, given, family string
}

type client struct {
	id, secret, redirect string
	method               oidc.AuthMethod
}

func (c *client) GetID() string                       { return c.id }
func (c *client) RedirectURIs() []string              { return []string{c.redirect} }
func (c *client) PostLogoutRedirectURIs() []string    { return nil }
func (c *client) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (c *client) AuthMethod() oidc.AuthMethod         { return c.method }
func (c *client) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *client) GrantTypes() []oidc.GrantType         { return []oidc.GrantType{oidc.GrantTypeCode} }
func (c *client) LoginURL(id string) string            { return "/login?id=" + url.QueryEscape(id) }
func (c *client) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeBearer }
func (c *client) IDTokenLifetime() time.Duration       { return 5 * time.Minute }
func (c *client) DevMode() bool                        { return true } // http:// redirect URIs
func (c *client) IsScopeAllowed(string) bool           { return false }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return true } // email in the ID token
func (c *client) ClockSkew() time.Duration             { return 0 }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

// --- authorization requests ----------------------------------------------

type authReq struct {
	id, clientID, redirectURI, state, nonce string
	scopes                                  []string
	responseType                            oidc.ResponseType
	responseMode                            oidc.ResponseMode
	challenge                               *oidc.CodeChallenge
	subject                                 string
	done                                    bool
	authTime                                time.Time
}

func (a *authReq) GetID() string                         { return a.id }
func (a *authReq) GetACR() string                        { return "" }
func (a *authReq) GetAMR() []string                      { return []string{"pwd"} }
func (a *authReq) GetAudience() []string                 { return []string{a.clientID} }
func (a *authReq) GetAuthTime() time.Time                { return a.authTime }
func (a *authReq) GetClientID() string                   { return a.clientID }
func (a *authReq) GetCodeChallenge() *oidc.CodeChallenge { return a.challenge }
func (a *authReq) GetNonce() string                      { return a.nonce }
func (a *authReq) GetRedirectURI() string                { return a.redirectURI }
func (a *authReq) GetResponseType() oidc.ResponseType    { return a.responseType }
func (a *authReq) GetResponseMode() oidc.ResponseMode    { return a.responseMode }
func (a *authReq) GetScopes() []string                   { return a.scopes }
func (a *authReq) GetState() string                      { return a.state }
func (a *authReq) GetSubject() string                    { return a.subject }
func (a *authReq) Done() bool                            { return a.done }

// --- storage (in memory) ----------------------------------------------------

type storage struct {
	mu      sync.Mutex // guards everything below: the OP calls from many goroutines
	client  *client
	user    user
	users   map[string]user // by id: who a token's subject is
	keys    []*key          // the last signs
	reqs    map[string]*authReq
	codes   map[string]string // code -> request id
	deny    bool
	counter struct{ keys, discovery, token, basic, post atomic.Int64 }
}

func (s *storage) CreateAuthRequest(_ context.Context, r *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	a := &authReq{id: randID(), clientID: r.ClientID, redirectURI: r.RedirectURI, state: r.State,
		nonce: r.Nonce, scopes: r.Scopes, responseType: r.ResponseType, responseMode: r.ResponseMode}
	if r.CodeChallenge != "" {
		a.challenge = &oidc.CodeChallenge{Challenge: r.CodeChallenge, Method: r.CodeChallengeMethod}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs[a.id] = a
	return a, nil
}

func (s *storage) AuthRequestByID(_ context.Context, id string) (op.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.reqs[id]; ok {
		return a, nil
	}
	return nil, errors.New("no such request")
}

func (s *storage) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	s.mu.Lock()
	id, ok := s.codes[code]
	s.mu.Unlock()
	if !ok {
		return nil, errors.New("no such code")
	}
	return s.AuthRequestByID(ctx, id)
}

func (s *storage) SaveAuthCode(_ context.Context, id, code string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.codes[code] = id
	return nil
}

func (s *storage) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.reqs, id)
	for c, r := range s.codes {
		if r == id {
			delete(s.codes, c) // a code is good once
		}
	}
	return nil
}

func (s *storage) CreateAccessToken(context.Context, op.TokenRequest) (string, time.Time, error) {
	return randID(), time.Now().Add(5 * time.Minute), nil
}

func (s *storage) CreateAccessAndRefreshTokens(context.Context, op.TokenRequest, string) (string, string, time.Time, error) {
	return "", "", time.Time{}, errors.New("no refresh tokens here")
}

func (s *storage) TokenRequestByRefreshToken(context.Context, string) (op.RefreshTokenRequest, error) {
	return nil, op.ErrInvalidRefreshToken
}

func (s *storage) TerminateSession(context.Context, string, string) error { return nil }

func (s *storage) RevokeToken(context.Context, string, string, string) *oidc.Error { return nil }

func (s *storage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}

func (s *storage) SigningKey(context.Context) (op.SigningKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return signingKey{s.keys[len(s.keys)-1]}, nil
}

func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return []jose.SignatureAlgorithm{s.keys[len(s.keys)-1].alg}, nil
}

func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	s.counter.keys.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]op.Key, 0, len(s.keys))
	for _, k := range s.keys {
		out = append(out, publicKey{k})
	}
	return out, nil
}

func (s *storage) GetClientByClientID(_ context.Context, id string) (op.Client, error) {
	if id != s.client.id {
		return nil, errors.New("unknown client")
	}
	return s.client, nil
}

func (s *storage) AuthorizeClientIDSecret(_ context.Context, id, secret string) error {
	s.counter.token.Add(1)
	if id != s.client.id || secret != s.client.secret {
		return errors.New("wrong client credentials")
	}
	return nil
}

func (s *storage) fill(info *oidc.UserInfo, subject string, scopes []string) error {
	s.mu.Lock()
	u, ok := s.users[subject]
	s.mu.Unlock()
	if !ok {
		return errors.New("unknown user")
	}
	for _, sc := range scopes {
		switch sc {
		case oidc.ScopeOpenID:
			info.Subject = u.id
		case oidc.ScopeEmail:
			info.Email = u.email
			info.EmailVerified = true
		case oidc.ScopeProfile:
			info.GivenName = u.given
			info.FamilyName = u.family
			info.Name = u.given + " " + u.family
		}
	}
	return nil
}

func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil // deprecated by the OP; SetUserinfoFromRequest does it
}

func (s *storage) SetUserinfoFromRequest(_ context.Context, info *oidc.UserInfo, r op.IDTokenRequest, scopes []string) error {
	return s.fill(info, r.GetSubject(), scopes)
}

func (s *storage) SetUserinfoFromToken(_ context.Context, info *oidc.UserInfo, _, subject, _ string) error {
	return s.fill(info, subject, []string{oidc.ScopeOpenID, oidc.ScopeEmail, oidc.ScopeProfile})
}

func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return errors.New("no introspection here")
}

func (s *storage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return map[string]any{}, nil
}

func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errors.New("no JWT profile clients here")
}

func (s *storage) ValidateJWTProfileScopes(_ context.Context, _ string, scopes []string) ([]string, error) {
	return scopes, nil
}

func (s *storage) Health(context.Context) error { return nil }

// --- the login step and the test endpoints ----------------------------------

// login approves the request for the current user at once, or refuses it
// after POST /test/deny.
func (s *storage) login(issuer string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		s.mu.Lock()
		a, ok := s.reqs[id]
		deny := s.deny
		s.deny = false
		if ok && !deny {
			a.subject = s.user.id
			a.done = true
			a.authTime = time.Now()
		}
		s.mu.Unlock()
		if !ok {
			http.Error(w, "no such authorization request", http.StatusBadRequest)
			return
		}
		if deny {
			q := url.Values{"error": {"access_denied"}, "error_description": {"the user said no"},
				"state": {a.state}}
			http.Redirect(w, r, a.redirectURI+"?"+q.Encode(), http.StatusFound)
			return
		}
		http.Redirect(w, r, issuer+"/authorize/callback?id="+url.QueryEscape(id), http.StatusFound)
	}
}

func (s *storage) rotate(w http.ResponseWriter, r *http.Request) {
	alg := r.URL.Query().Get("alg")
	if alg == "" {
		alg = "RS256"
	}
	k, err := newKey(alg)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	if r.URL.Query().Get("drop") == "1" {
		s.keys = nil
	}
	s.keys = append(s.keys, k)
	s.mu.Unlock()
	json.NewEncoder(w).Encode(map[string]string{"kid": k.kid, "alg": alg})
}

func (s *storage) setUser(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sum := sha256.Sum256([]byte(q.Get("email")))
	u := user{id: "u-" + hex.EncodeToString(sum[:8]), email: q.Get("email"), given: q.Get("given"),
		family: q.Get("family")}
	s.mu.Lock()
	s.user = u
	s.users[u.id] = u
	s.mu.Unlock()
	json.NewEncoder(w).Encode(map[string]string{"sub": u.id})
}

func main() {
	port := flag.Int("port", 0, "port on 127.0.0.1 (0: any free one)")
	clientID := flag.String("client-id", "ember", "the client's id")
	secret := flag.String("client-secret", "", "the client's secret")
	redirect := flag.String("redirect-uri", "", "the client's registered redirect URI")
	method := flag.String("auth-method", "client_secret_basic", "client_secret_basic or client_secret_post")
	email := flag.String("email", "oidc-user@example.test", "the user's email")
	alg := flag.String("alg", "RS256", "the first signing key's algorithm: RS256, ES256 or EdDSA")
	postOnly := flag.Bool("post-only", false, "discovery lists only client_secret_post")
	flag.Parse()
	if *secret == "" || *redirect == "" {
		log.Fatal("-client-secret and -redirect-uri are needed")
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		log.Fatal(err)
	}
	issuer := "http://" + ln.Addr().String()
	k, err := newKey(*alg)
	if err != nil {
		log.Fatal(err)
	}
	s := &storage{
		client: &client{id: *clientID, secret: *secret, redirect: *redirect, method: oidc.AuthMethod(*method)},
		users:  map[string]user{},
		keys:   []*key{k},
		reqs:   map[string]*authReq{},
		codes:  map[string]string{},
	}
	sum := sha256.Sum256([]byte(*email))
	s.user = user{id: "u-" + hex.EncodeToString(sum[:8]), email: *email, given: "Ada", family: "Lovelace"}
	s.users[s.user.id] = s.user
	cfg := &op.Config{CodeMethodS256: true, AuthMethodPost: true}
	if _, err := rand.Read(cfg.CryptoKey[:]); err != nil {
		log.Fatal(err)
	}
	provider, err := op.NewProvider(cfg, s, op.StaticIssuer(issuer), op.WithAllowInsecure())
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/login", s.login(issuer))
	mux.HandleFunc("POST /test/rotate", s.rotate)
	mux.HandleFunc("POST /test/user", s.setUser)
	mux.HandleFunc("POST /test/deny", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		s.deny = true
		s.mu.Unlock()
	})
	mux.HandleFunc("GET /test/stats", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(map[string]int64{"keys": s.counter.keys.Load(),
			"discovery": s.counter.discovery.Load(), "token": s.counter.token.Load(),
			"token_basic": s.counter.basic.Load(), "token_post": s.counter.post.Load()})
	})
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			s.counter.discovery.Add(1)
			if *postOnly {
				rec := httptest.NewRecorder()
				provider.ServeHTTP(rec, r)
				var doc map[string]any
				if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				doc["token_endpoint_auth_methods_supported"] = []string{"client_secret_post"}
				w.Header().Set("Content-Type", "application/json")
				json.NewEncoder(w).Encode(doc)
				return
			}
		case "/oauth/token":
			if _, _, ok := r.BasicAuth(); ok {
				s.counter.basic.Add(1)
			} else if r.ParseForm() == nil && r.PostForm.Get("client_secret") != "" {
				s.counter.post.Add(1)
			}
		}
		provider.ServeHTTP(w, r)
	}))
	fmt.Printf("ISSUER %s\n", issuer)
	os.Stdout.Sync()
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.Serve(ln))
}
