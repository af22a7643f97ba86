package store

import (
	"context"

	"github.com/gpuaas/gpuaas/internal/iam"
)

// iam.SigningKey is the IAM domain's.

const signingKeyCols = `kid, purpose, algorithm, private_key, public_key, created_at, retired_at`

func (q *Queries) InsertSigningKey(ctx context.Context, k iam.SigningKey) error {
	_, err := q.exec(ctx, `INSERT INTO signing_keys (`+signingKeyCols+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		k.KID, k.Purpose, k.Algorithm, k.PrivateKey, k.PublicKey, ts(k.CreatedAt), nullTS(k.RetiredAt))
	return err
}

// SigningKeys lists the keys of a purpose, oldest first, retired ones included
// (their public halves still verify tokens issued before retirement).
func (q *Queries) SigningKeys(ctx context.Context, purpose string) ([]iam.SigningKey, error) {
	rows, err := q.query(ctx, `SELECT `+signingKeyCols+` FROM signing_keys WHERE purpose = ? ORDER BY created_at, kid`, purpose)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(s interface{ Scan(...any) error }) (iam.SigningKey, error) {
		var k iam.SigningKey
		err := s.Scan(&k.KID, &k.Purpose, &k.Algorithm, &k.PrivateKey, &k.PublicKey, scanTime(&k.CreatedAt), scanTime(&k.RetiredAt))
		return k, err
	})
}
